//go:build tools

// Package tools pins KWOK (Apache-2.0) for the fleet tests and bench: its
// controller runs out of cluster against the test control plane and plays
// fake nodes and their pods.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
