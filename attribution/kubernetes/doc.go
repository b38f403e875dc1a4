// Package kubernetes answers, from the kubelet, which container holds which
// accelerator and which workload that container belongs to.
//
// Device ownership comes from the kubelet pod-resources API (Client): every
// device a device plugin allocated to a container, whether or not a process
// runs on it yet. Device-plugin IDs are normalised to the identities the
// vendor libraries report (NormalizeDeviceID), and time-sliced replicas are
// counted against what the device plugin advertises (Allocations).
//
// Pod metadata (UID, labels, owning workload) comes from a MetadataSource kept
// up to date by a watch, never by a request per scrape: the kubelet Pods API
// where the kubelet serves it, else a node-scoped metadata-only watch through
// the API server, else none (see NewMetadataSource).
//
// The package returns plain Go values and knows nothing of Prometheus.
package kubernetes
