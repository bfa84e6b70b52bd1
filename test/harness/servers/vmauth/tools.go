//go:build tools

// Pins vmauth, the authenticating proxy of VictoriaMetrics (Apache-2.0), as a
// dependency of this module, so that `go build
// github.com/VictoriaMetrics/VictoriaMetrics/app/vmauth` resolves it with the
// versions (and checksums) recorded in go.mod and go.sum. The tenants e2e test
// (test/e2e/tenants.test.ts) puts it in front of VictoriaLogs: it maps each
// namespace's credential to that namespace's VictoriaLogs tenant.
package tools

import _ "github.com/VictoriaMetrics/VictoriaMetrics/app/vmauth"
