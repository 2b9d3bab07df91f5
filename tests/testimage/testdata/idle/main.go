// Command idle is the program of test images: with no arguments it waits
// forever (a sandbox that stays up); with some, it prints each and the
// contents of the file it names, then exits.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	for len(os.Args) == 1 {
		// Not select{}: with no other goroutine, the runtime calls that
		// a deadlock and exits.
		time.Sleep(time.Hour)
	}
	for _, a := range os.Args[1:] {
		if b, err := os.ReadFile(a); err == nil {
			fmt.Printf("%s: %s\n", a, b)
		} else {
			fmt.Printf("%s: %v\n", a, err)
		}
	}
}
