package httpapi

import (
	"strconv"

	"smolvm.dev/smolvm/internal/names"
)

// field is a name a request body gives, with its kind.
type field struct {
	name  string // the JSON field
	kind  names.Kind
	value string
}

// checkNames checks the names a request body gives, each with the names
// rule of its kind, as path parameters are; an empty one means the
// default and is left alone. The Manager checks again: this names the
// field in the 400.
func checkNames(fields ...field) error {
	for _, f := range fields {
		if f.value == "" {
			continue
		}
		if err := names.Check(f.kind, f.value); err != nil {
			return invalid(f.name, "field "+strconv.Quote(f.name)+": "+err.Error())
		}
	}
	return nil
}
