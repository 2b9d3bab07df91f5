package httpapi

import _ "embed"

// openapiJSON is the API's OpenAPI 3.1 description, written by hand next
// to the handlers; TestOpenAPIMatchesRoutes keeps the two in step.
//
//go:embed openapi.json
var openapiJSON []byte
