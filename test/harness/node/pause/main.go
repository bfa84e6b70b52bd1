// Command pause holds a pod sandbox's namespaces open, as registry.k8s.io/pause
// does: it sleeps until SIGINT or SIGTERM and, as PID 1 of a pod that shares
// its PID namespace, reaps the orphans that get reparented to it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
