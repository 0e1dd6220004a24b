// Package broker is the async priority inbox between the blackboard and the
// scheduling engine. It reads compute.request messages from the ten intake
// lanes (Redis streams, one per request priority, consumer group
// compute-broker) into a bounded in-memory Inbox, and hands them to the
// adapter (Next), which makes each one a durable job (Accept) and moves it
// through its lifecycle (Transition).
//
// Vocabulary: a lane is an intake stream; a delivery is one hand-out of a
// request, under a lease that lapses unless the request is accepted; a job
// record is P:job:<id>, created once per idempotency key; a dead letter is a
// refused request in the dead-letter stream, with a reason and a wire
// reason code. README.md states the delivery guarantees.
package broker
