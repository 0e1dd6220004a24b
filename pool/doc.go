// Package pool is how the adapters sharing a board form one pool: the
// scheduler lease with its fencing epoch (lease.go), the node registry
// with heartbeats (registry.go), each node's durable assignment channel
// from the scheduler to the node's agent, and the agents' report stream
// back to the scheduler (both in channel.go).
//
// Exactly one adapter acts as the scheduler at a time: it holds the lease,
// a Redis STRING with an expiry that it renews, and every lease acquisition
// increments the fencing epoch. Every write the scheduler makes through
// this package (assignments, stop orders) checks, in the same Lua step,
// that the epoch is still the one it was elected with, so a deposed
// scheduler — paused, partitioned, or simply slow to notice — changes
// nothing. The job store applies the same check to the scheduler's job
// transitions (jobs.Fence).
//
// An assignment is one Lua step: the job record must still be queued; its
// node field is set to the chosen node, the job joins the node's job set,
// and a start message is appended to the node's stream. The agent reads the
// stream through a consumer group (so an agent that dies mid-way reads its
// unacknowledged messages again), moves the job queued → running with a
// compare-and-set that also checks the record still names its node (a job
// the scheduler moved elsewhere meanwhile is refused), starts it, stores
// the provider's handle on the record, and acknowledges the message.
//
// Nothing here reads the wall clock except through the Clock it is given.
package pool
