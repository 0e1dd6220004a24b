// Package broker is the async priority inbox between the blackboard and the
// scheduling engine. It reads compute.request messages from the intake
// lanes (Redis streams, one per module and request priority, plus the ten
// legacy shared lanes on a trusted board; consumer group compute-broker)
// into a bounded in-memory Inbox, and hands them to the
// adapter (Next), which makes each one a durable job (Accept, into the job
// record store of package jobs, Config.Jobs) and moves it through its
// lifecycle there (jobs.Store.Transition).
//
// Vocabulary: a lane is an intake stream; a delivery is one hand-out of a
// request, under a lease that lapses unless the request is accepted; a job
// record is P:job:<id>, created once per idempotency key; a dead letter is a
// refused request in the dead-letter stream, with a reason and a wire
// reason code. A request's module comes from its lane on a board with
// Redis ACLs (Config.Identity); events are hints, re-checked against the
// entry's own status. README.md states the delivery guarantees.
package broker
