// Command hello is a static program for images built by tests: it prints
// its arguments and the contents of the files they name.
package main

import (
	"fmt"
	"os"
)

func main() {
	for _, a := range os.Args[1:] {
		if b, err := os.ReadFile(a); err == nil {
			fmt.Printf("%s: %s\n", a, b)
		} else {
			fmt.Printf("%s: %v\n", a, err)
		}
	}
}
