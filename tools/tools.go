//go:build tools

// Package tools pins the build tools the repository uses so that every
// developer and CI builds the same versions from this module's go.sum:
// jsonnet and jsonnetfmt for the mixin (mixin/mixin.mk), helm for the chart
// (chart/chart.mk), nfpm for the deb and rpm packages
// (packaging/packaging.mk) and staticcheck for make test. Each is built into
// bin/ once and reused.
package tools

import (
	_ "github.com/google/go-jsonnet/cmd/jsonnet"
	_ "github.com/google/go-jsonnet/cmd/jsonnetfmt"
	_ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
