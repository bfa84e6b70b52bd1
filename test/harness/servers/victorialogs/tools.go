//go:build tools

// Pins the VictoriaLogs server program as a dependency of this module, so that
// `go build github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs` resolves
// it with the versions (and checksums) recorded in go.mod and go.sum.
package tools

import _ "github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs"
