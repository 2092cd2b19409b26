// Command etcd is go.etcd.io/etcd/server/v3's etcdmain, the same entry point as the
// upstream etcd binary (its root module's main.go).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
