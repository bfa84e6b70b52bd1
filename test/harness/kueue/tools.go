//go:build tools

// Pins Kueue's controller-manager as a dependency of this module, so that
// `go build sigs.k8s.io/kueue/cmd/kueue` resolves it with the versions (and
// checksums) recorded in go.mod and go.sum. The CRDs and webhook manifests the
// e2e harness installs are read from the same module version, in the module
// cache.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
