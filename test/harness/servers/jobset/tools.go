//go:build tools

// Pins the JobSet controller manager (the module's root package, package
// main) as a dependency of this module, so that `go build sigs.k8s.io/jobset`
// resolves it with the versions (and checksums) recorded in go.mod and go.sum:
// exactly the dependency versions JobSet v0.12.0 was released with.
package tools

import _ "sigs.k8s.io/jobset"
