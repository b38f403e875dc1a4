package engines

import "strings"

// tritonSpec covers NVIDIA Triton Inference Server, the metrics its
// TensorRT-LLM backend adds, and the vllm: families its vLLM backend adds
// (triton-inference-server/vllm_backend src/utils/metrics.py), which Triton
// labels model and version like its own. The nv_gpu_*, nv_cpu_* and
// nv_energy_* series are left to the GPU collectors.
var tritonSpec = spec{
	owns: func(name string) bool {
		return strings.HasPrefix(name, "nv_inference_") || strings.HasPrefix(name, "nv_trt_llm_")
	},
	model: "model",
	// Two versions of a model can be loaded at once: they are different
	// series, and "version" alone would read as the engine's version.
	keep: map[string]string{"version": modelVersionLabel},
	mappings: []mapping{
		// Only the backends report requests in flight. A model is served
		// by one backend, so at most one of these has it.
		{family: requestsRunning, from: []source{
			{name: "nv_trt_llm_request_metrics", match: label{"request_type", "active"}},
			{name: "vllm:num_requests_running"},
		}},
		// Triton hands TensorRT-LLM and vLLM requests straight to the
		// backend, so the backend's queue is the meaningful one where it
		// exists.
		{family: requestsWaiting, from: []source{
			{name: "nv_trt_llm_request_metrics", match: label{"request_type", "waiting"}},
			{name: "vllm:num_requests_waiting"},
			{name: "nv_inference_pending_request_count"},
		}},
		{family: kvCacheUsage, from: []source{
			{name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "fraction"}},
			{
				name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "used"},
				over: &source{name: "nv_trt_llm_kv_cache_block_metrics", match: label{"kv_cache_block_type", "max"}},
			},
			{name: "vllm:kv_cache_usage_perc"},
			{name: "vllm:gpu_cache_usage_perc"},
		}},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypePrompt}, from: sources("vllm:prompt_tokens_total")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypeGeneration}, from: sources("vllm:generation_tokens_total")},
		// Triton's only per-request histogram (histogram_latencies=true,
		// decoupled models) is in milliseconds.
		{family: timeToFirstToken, from: []source{
			{name: "nv_inference_first_response_histogram_ms", div: 1e3},
			{name: "vllm:time_to_first_token_seconds"},
		}},
		// The vLLM backend observes time_per_output_token_seconds once per
		// token (inter_token_latencies_iter), as vLLM itself does.
		{family: interTokenLatency, from: sources("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")},
		{family: timePerOutputToken, from: sources("vllm:request_time_per_output_token_seconds")},
		// Triton's latencies are cumulative microsecond counters over
		// successful requests, which give only a mean: the vLLM backend's
		// histograms, where there are some, are read first.
		{family: requestDuration, from: []source{
			{name: "vllm:e2e_request_latency_seconds"},
			{name: "nv_inference_request_duration_us", div: 1e6, count: &source{name: "nv_inference_request_success"}},
		}},
		{family: queueTime, from: []source{
			{name: "vllm:request_queue_time_seconds"},
			{name: "nv_inference_queue_duration_us", div: 1e6, count: &source{name: "nv_inference_request_success"}},
		}},
		// Triton counts every model's requests by outcome, the vLLM
		// backend's included: vllm:request_success_total would count them
		// twice.
		{family: requestsTotal, set: label{outcomeLabel, outcomeSuccess}, from: sources("nv_inference_request_success")},
		{family: requestsTotal, outcome: &tritonOutcomes, from: sources("nv_inference_request_failure")},
		{family: preemptionsTotal, from: sources("vllm:num_preemptions_total")},
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
