package adapter

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 document of the HTTP API that
// apiHandler serves (and of broker.Handler's inbox routes under it), served
// at GET /api/v1/openapi.json. integration/openapi_test.go checks it
// against the routes both register, in both directions.
//
//go:embed openapi.json
var openAPIDocument []byte

// serveOpenAPI answers with the OpenAPI document.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
}
