// Package local is the provider that runs tasks as child processes of the
// adapter, on the adapter's own machine.
//
// Each task gets its own process group (so a stop reaches every process it
// spawned) and a directory <WorkDir>/<task id> holding stdout, stderr,
// payload, and two small JSON records: state (pid, process start time and
// boot ID, written at start) and exit (the outcome, written when the adapter
// reaps the process). A restarted adapter reads them to re-attach: a
// finished task is reported from exit; a live process whose pid, start time
// and boot ID all match is running; anything else is lost, because its exit
// status died with the adapter that was its parent.
//
// Resources are not enforced yet (cgroups are roadmap item 5); GPU IDs are
// exported as CUDA_VISIBLE_DEVICES. Discover sizes the local node.
package local
