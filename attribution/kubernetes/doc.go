// Package kubernetes answers, from the kubelet, which container holds which
// accelerator and which workload that container belongs to.
//
// Device ownership comes from the kubelet pod-resources API (Client): every
// device a device plugin allocated to a container, whether or not a process
// runs on it yet. Device-plugin IDs are normalised to the identities the
// vendor libraries report (NormalizeDeviceID), and time-sliced replicas are
// counted against what the device plugin advertises (Allocations).
//
// Devices allocated through Dynamic Resource Allocation come in the same
// pod-resources answer, named by their DRA driver and CDI device names. The
// CDI specs the driver wrote on the node (CDISpecs), with the NVIDIA
// driver's procfs tables for device minors, say which GPU or MIG instance
// each is; this node's ResourceSlices (ResourceSliceSource) are the
// fallback where the API server is reachable. A claim used by several
// containers is split evenly between them (ClaimAllocations).
//
// Pod metadata (UID, labels, owning workload) comes from a MetadataSource kept
// up to date by a watch, never by a request per scrape: the kubelet Pods API
// where the kubelet serves it, else a node-scoped metadata-only watch through
// the API server, else none (see NewMetadataSource).
//
// The package returns plain Go values and knows nothing of Prometheus.
package kubernetes
