package engines

import "slices"

// nimSpec covers NVIDIA NIM for LLMs 1.x, which exposes vLLM V0 names without
// the vllm: prefix. NIM 2.x "passes through the inference backend's native
// Prometheus metrics without modification" (NIM for LLMs documentation,
// Logging and Observability): vLLM's vllm: names, SGLang's sglang: ones.
var nimSpec = spec{
	passesThrough: true,
	owns: func(name string) bool {
		return slices.Contains([]string{"num_requests_running", "num_requests_waiting", "gpu_cache_usage_perc", "num_request_max"}, name)
	},
	model: "model_name",
	mappings: []mapping{
		{family: requestsRunning, from: sources("num_requests_running")},
		{family: requestsWaiting, from: sources("num_requests_waiting")},
		{family: kvCacheUsage, from: sources("gpu_cache_usage_perc")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypePrompt}, from: sources("prompt_tokens_total")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypeGeneration}, from: sources("generation_tokens_total")},
		{family: timeToFirstToken, from: sources("time_to_first_token_seconds")},
		{family: interTokenLatency, from: sources("time_per_output_token_seconds")},
		{family: requestDuration, from: sources("e2e_request_latency_seconds")},
		// NIM 1.x labels request_success_total with no finish reason, so
		// every request in it is a success; should a release add vLLM's
		// finished_reason, vLLM's reading applies. request_finish_total
		// splits the same requests by reason: reading it as well would
		// count them twice.
		{family: requestsTotal, outcome: &vllmOutcomes, from: sources("request_success_total")},
		{family: requestsTotal, set: label{outcomeLabel, outcomeError}, from: sources("request_failure_total")},
	},
}
