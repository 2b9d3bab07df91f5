package httpapi

// WriteError lets the external tests answer with the server's own errors.
var WriteError = writeError
