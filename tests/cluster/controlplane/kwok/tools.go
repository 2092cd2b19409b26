//go:build tools

// Package tools pins the command scripts/controlplane.sh builds.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
