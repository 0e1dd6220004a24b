package wire

import (
	"embed"
	"io/fs"
)

// The canonical JSON Schemas. docs/schema/ holds byte-identical copies for
// readers of the docs; TestSchemaCopiesIdentical keeps them so.
//
//go:embed schema/*.json
var schemaFS embed.FS

// RequestSchemaFile is the name of the compute.request schema in Schemas.
const RequestSchemaFile = "compute-request.v1.schema.json"

// Schemas returns the v1 JSON Schemas (draft 2020-12), one file each:
// entry.schema.json, compute-request.v1.schema.json, compute-job.v1.schema.json,
// compute-metrics.v1.schema.json, events.v1.schema.json,
// inbox-message.v1.schema.json (legacy shared lanes),
// inbox-message.v2.schema.json (per-module lanes), dead-letter.v1.schema.json.
func Schemas() fs.FS {
	sub, err := fs.Sub(schemaFS, "schema")
	if err != nil {
		panic("wire: " + err.Error()) // "schema" is a valid path; cannot happen
	}
	return sub
}

// RequestSchema returns the JSON Schema of compute.request data, version 1.
func RequestSchema() []byte {
	b, err := schemaFS.ReadFile("schema/" + RequestSchemaFile)
	if err != nil {
		panic("wire: " + err.Error()) // embedded at build time; cannot happen
	}
	return b
}
