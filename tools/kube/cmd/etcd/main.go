// Command etcd is etcd's server, built from the Go module proxy at the
// version this module pins (Debian's etcd is too old for kube-apiserver).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
