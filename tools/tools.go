//go:build tools

// Package tools pins the build tools the repository uses (jsonnet and
// jsonnetfmt for the mixin) so that every developer and CI builds the same
// versions from this module's go.sum.
package tools

import (
	_ "github.com/google/go-jsonnet/cmd/jsonnet"
	_ "github.com/google/go-jsonnet/cmd/jsonnetfmt"
)
