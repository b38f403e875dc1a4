package engines

import "strings"

// tritonSpec covers NVIDIA Triton Inference Server and the metrics its
// TensorRT-LLM backend adds. The nv_gpu_*, nv_cpu_* and nv_energy_* series
// are left to the GPU collectors.
var tritonSpec = spec{
	owns: func(name string) bool {
		return strings.HasPrefix(name, "nv_inference_") || strings.HasPrefix(name, "nv_trt_llm_")
	},
	model: "model",
	// Two versions of a model can be loaded at once: they are different
	// series, and "version" alone would read as the engine's version.
	keep: map[string]string{"version": modelVersionLabel},
	mappings: []mapping{
		// Only the TensorRT-LLM backend reports requests in flight.
		{family: requestsRunning, from: []source{{name: "nv_trt_llm_request_metrics", match: label{"request_type", "active"}}}},
		// Triton hands TensorRT-LLM requests straight to the backend, so
		// the backend's queue is the meaningful one where it exists.
		{family: requestsWaiting, from: []source{
			{name: "nv_trt_llm_request_metrics", match: label{"request_type", "waiting"}},
			{name: "nv_inference_pending_request_count"},
		}},
		{family: kvCacheUsage, from: []source{
			{name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "fraction"}},
			{
				name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "used"},
				over: &source{name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "max"}},
			},
		}},
		// Triton's only per-request histogram (histogram_latencies=true,
		// decoupled models) is in milliseconds.
		{family: timeToFirstToken, from: []source{{name: "nv_inference_first_response_histogram_ms", div: 1e3}}},
		// Latencies are cumulative microsecond counters over successful
		// requests.
		{family: requestDuration, from: []source{{name: "nv_inference_request_duration_us", div: 1e6, count: &source{name: "nv_inference_request_success"}}}},
		{family: queueTime, from: []source{{name: "nv_inference_queue_duration_us", div: 1e6, count: &source{name: "nv_inference_request_success"}}}},
		{family: requestsTotal, set: label{outcomeLabel, outcomeSuccess}, from: sources("nv_inference_request_success")},
		{family: requestsTotal, outcome: &tritonOutcomes, from: sources("nv_inference_request_failure")},
	},
}

// tritonOutcomes reads the reason label Triton 24.x added to failures;
// earlier releases have none, and those failures are errors.
var tritonOutcomes = outcomes{
	label: "reason",
	values: map[string]string{
		"REJECTED": outcomeRejected,
		"CANCELED": outcomeAborted,
	},
	other: outcomeError,
}
