package engines

import (
	"fmt"
	"slices"
)

// Kind is the Prometheus type of a canonical family.
type Kind int

// The kinds of canonical families. Engine summaries are never passed on:
// their quantiles cannot be aggregated across series.
const (
	Gauge Kind = iota + 1
	Counter
	Histogram
)

func (k Kind) String() string {
	switch k {
	case Gauge:
		return "gauge"
	case Counter:
		return "counter"
	case Histogram:
		return "histogram"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Bucket is one cumulative histogram bucket: Count observations were less
// than or equal to UpperBound.
type Bucket struct {
	UpperBound float64
	Count      uint64
}

// Sample is one series of a canonical family.
type Sample struct {
	Name string
	// Labels always holds "model" (empty when neither the engine nor the
	// caller names one) and whatever else the family needs to keep series
	// apart: "type", "outcome", "model_version".
	Labels map[string]string
	Kind   Kind

	// Value is the reading of a gauge or a counter.
	Value float64

	// Buckets, Count and Sum describe a histogram. Buckets are in ascending
	// order of UpperBound and the last one is +Inf, with Count observations.
	Buckets []Bucket
	Count   uint64
	Sum     float64
}

// Family describes a canonical family, for the collector's descriptors.
type Family struct {
	Name string
	Kind Kind
	Help string

	// max makes series that collapse into one (engine cores or ranks of
	// one model) keep the largest value: a ratio cannot be added up, and
	// the fullest KV cache is the one that throttles the model.
	max bool
	// ratio says a value lies in 0..1.
	ratio bool
}

// malformed says why v cannot be a value of the gauge or counter family f:
// a counter below 0 (-5 then 5 read as 10 made), a ratio outside 0..1.
// NaN is not told here: merge tells it where it is added up, and a series
// of its own passes through as the engine gave it.
func (f Family) malformed(v float64) error {
	switch {
	case f.Kind == Counter && v < 0:
		return fmt.Errorf("%g is negative, which no count is", v)
	case f.ratio && (v < 0 || v > 1):
		return fmt.Errorf("%g is outside 0..1, which a ratio is not", v)
	}
	return nil
}

// Canonical family names.
const (
	requestsRunning    = "xpu_inference_requests_running"
	requestsWaiting    = "xpu_inference_requests_waiting"
	tokensTotal        = "xpu_inference_tokens_total"
	timeToFirstToken   = "xpu_inference_time_to_first_token_seconds"
	interTokenLatency  = "xpu_inference_inter_token_latency_seconds"
	timePerOutputToken = "xpu_inference_request_time_per_output_token_seconds"
	requestDuration    = "xpu_inference_request_duration_seconds"
	queueTime          = "xpu_inference_queue_time_seconds"
	kvCacheUsage       = "xpu_inference_kv_cache_usage_ratio"
	requestsTotal      = "xpu_inference_requests_total"
	preemptionsTotal   = "xpu_inference_preemptions_total"
)

// Canonical label names and values.
const (
	modelLabel        = "model"
	modelVersionLabel = "model_version"
	tokenTypeLabel    = "type"
	outcomeLabel      = "outcome"

	tokenTypePrompt     = "prompt"
	tokenTypeGeneration = "generation"

	outcomeSuccess  = "success"
	outcomeError    = "error"
	outcomeAborted  = "aborted"
	outcomeRejected = "rejected"
)

var families = []Family{
	{Name: requestsRunning, Kind: Gauge, Help: "Requests the inference engine is processing now."},
	{Name: requestsWaiting, Kind: Gauge, Help: "Requests queued in the inference engine, not yet scheduled."},
	{Name: tokensTotal, Kind: Counter, Help: "Tokens processed by the inference engine, by type (prompt or generation)."},
	{Name: timeToFirstToken, Kind: Histogram, Help: "Time from the arrival of a request to its first generated token."},
	{Name: interTokenLatency, Kind: Histogram, Help: "Time between consecutive generated tokens, one observation per token."},
	{Name: timePerOutputToken, Kind: Histogram, Help: "Mean time per generated token of a request, one observation per request."},
	{Name: requestDuration, Kind: Histogram, Help: "End-to-end request latency measured by the inference engine."},
	{Name: queueTime, Kind: Histogram, Help: "Time requests spent queued before the inference engine started them."},
	{Name: kvCacheUsage, Kind: Gauge, Help: "Fraction of the inference engine's KV cache in use, 0 to 1.", max: true, ratio: true},
	{Name: requestsTotal, Kind: Counter, Help: "Requests the inference engine finished, by outcome (success, error, aborted, rejected)."},
	{Name: preemptionsTotal, Kind: Counter, Help: "Requests the inference engine preempted to free KV cache."},
}

// Families returns the canonical families, in a stable order.
func Families() []Family {
	return slices.Clone(families)
}

var familyByName = func() map[string]Family {
	m := make(map[string]Family, len(families))
	for _, f := range families {
		m[f.Name] = f
	}
	return m
}()
