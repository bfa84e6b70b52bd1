//go:build tools

// Pins Prometheus (Apache-2.0) as a dependency of this module, so that `go
// build` of its cmd/prometheus and cmd/promtool resolves them with the
// versions (and checksums) recorded in go.mod and go.sum. Built with the tag
// remove_all_sd (no cloud service discovery): the tests use static targets.
// The e2e suite scrapes the webhook and the harvester with it
// (test/e2e/prometheus.test.ts) and runs promtool over the chart's alerts
// (test/e2e/prometheus-rules.test.ts).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
