// Command smolvm runs isolated, checkpointable sandboxes for AI agents.
package main

import (
	"os"

	"smolvm.dev/smolvm/cmd/smolvm/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
