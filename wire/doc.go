// Package wire is computeboard's public, versioned wire contract: the shapes
// that Python modules write to and read from the Redis blackboard, and the
// strict decoder for compute requests.
//
// Vocabulary: an entry is one blackboard record (docs/wire-format.md); a
// request is the data of a compute.request entry (schema version 1); a job is
// the compute.job entry that tracks one request; a reason code (Code) says why
// a request was refused. The JSON Schemas in schema/ are the same files as
// docs/schema/ (a test keeps them byte-identical and in step with Request).
//
// wire imports only the standard library: callers pass the entry's raw data
// JSON and the few entry fields it needs (EntryInfo) as plain values.
package wire
