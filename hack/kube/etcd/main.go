// Command etcd is etcd's server, built from the go.etcd.io/etcd/server/v3 module.
//
// That module's go.mod replaces its sibling modules with relative paths, so
// `go install go.etcd.io/etcd/server/v3@version` refuses it; this module requires it
// instead and hands the command line to its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
