// Package jsondup finds JSON objects that give one key twice. encoding/json
// takes the last of them (and matches struct fields without regard to
// case), so {"name":"a","name":"b"} or {"name":"a","Name":"b"} decodes as
// "b" while a proxy, a log or a policy check in front may read "a": a
// request must say each thing once.
package jsondup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// MaxDepth bounds how deeply nested arrays and objects may be; requests
// need a handful of levels.
const MaxDepth = 32

// Error is a key given twice in one object, or nesting deeper than
// MaxDepth. Path is where, from the top: keys joined by dots, array
// elements as [i] ("network.hosts[2]").
type Error struct {
	Path string
	// Deep is set for nesting deeper than MaxDepth.
	Deep bool
}

func (e *Error) Error() string {
	if e.Deep {
		return fmt.Sprintf("at %q: nested deeper than %d levels", e.Path, MaxDepth)
	}
	return fmt.Sprintf("key %q given twice", e.Path)
}

// Check returns an *Error if data, one JSON value that decodes into v
// (a pointer, as for json.Unmarshal), has an object that gives a key twice:
// the same key, or for an object that decodes into a struct, two keys
// that name one field (encoding/json folds case). Other errors are
// data's syntax errors; call it on data json.Unmarshal accepted.
func Check(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers are skipped: no need to parse them
	w := walker{dec: dec}
	return w.value(reflect.TypeOf(v), 0)
}

// walker walks one document, keeping the path to the value at hand.
type walker struct {
	dec  *json.Decoder
	path []string // each a key or "[i]"
}

func (w *walker) where() string {
	var b strings.Builder
	for i, p := range w.path {
		if i > 0 && !strings.HasPrefix(p, "[") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// value walks the next value, which decodes into t (nil: unknown).
func (w *walker) value(t reflect.Type, depth int) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth == MaxDepth {
		return &Error{Path: w.where(), Deep: true}
	}
	t = target(t)
	if d == '[' {
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			w.path = append(w.path, "["+strconv.Itoa(i)+"]")
			if err := w.value(elem, depth+1); err != nil {
				return err
			}
			w.path = w.path[:len(w.path)-1]
		}
	} else if err := w.object(t, depth); err != nil {
		return err
	}
	_, err = w.dec.Token() // the closing delimiter
	return err
}

// object walks an object's members, after its '{'.
func (w *walker) object(t reflect.Type, depth int) error {
	var fields map[string]reflect.StructField // by JSON name
	var elem reflect.Type
	switch {
	case t != nil && t.Kind() == reflect.Struct:
		fields = map[string]reflect.StructField{}
		structFields(t, fields)
	case t != nil && t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		name, ft := key, elem
		if fields != nil {
			name, ft = field(fields, key)
		}
		w.path = append(w.path, key)
		if seen[name] {
			return &Error{Path: w.where()}
		}
		seen[name] = true
		if err := w.value(ft, depth+1); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	return nil
}

// target is the type whose shape a value takes: t without pointers, or
// nil where encoding/json does not decide the shape (an interface, or a
// type that decodes itself).
func target(t reflect.Type) reflect.Type {
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	for t != nil {
		if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
			return nil
		}
		if t.Kind() != reflect.Pointer {
			return t
		}
		t = t.Elem()
	}
	return nil
}

// structFields adds t's fields to fields by JSON name, those of embedded
// structs too (encoding/json promotes them).
func structFields(t reflect.Type, fields map[string]reflect.StructField) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if et := target(f.Type); f.Anonymous && name == "" && et != nil && et.Kind() == reflect.Struct {
			structFields(et, fields)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := fields[name]; !ok {
			fields[name] = f
		}
	}
}

// field returns the name of the field key decodes into and its type, as
// encoding/json matches them: exactly, else without regard to case. A
// key that matches no field is its own name (an unknown field, which the
// decoder refuses or skips).
func field(fields map[string]reflect.StructField, key string) (string, reflect.Type) {
	if f, ok := fields[key]; ok {
		return key, f.Type
	}
	for name, f := range fields {
		if strings.EqualFold(name, key) {
			return name, f.Type
		}
	}
	return "\x00" + key, nil // never a field's name
}
