package engines

import "strings"

// vllmSpec covers the V0 and V1 engines. V1 adds engine="<index>" for each
// engine core (data-parallel rank) of a process: like every rank label it is
// aggregated away, so one server is one series per model.
var vllmSpec = spec{
	owns:  func(name string) bool { return strings.HasPrefix(name, "vllm:") },
	model: "model_name",
	mappings: []mapping{
		{family: requestsRunning, from: sources("vllm:num_requests_running")},
		{family: requestsWaiting, from: sources("vllm:num_requests_waiting")},
		// gpu_cache_usage_perc was renamed in V1; despite the name both
		// are ratios.
		{family: kvCacheUsage, from: sources("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypePrompt}, from: sources("vllm:prompt_tokens_total")},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypeGeneration}, from: sources("vllm:generation_tokens_total")},
		{family: timeToFirstToken, from: sources("vllm:time_to_first_token_seconds")},
		// time_per_output_token_seconds observed every token, like its
		// V1 successor; it is not request_time_per_output_token_seconds.
		{family: interTokenLatency, from: sources("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")},
		{family: timePerOutputToken, from: sources("vllm:request_time_per_output_token_seconds")},
		{family: requestDuration, from: sources("vllm:e2e_request_latency_seconds")},
		{family: queueTime, from: sources("vllm:request_queue_time_seconds")},
		{family: requestsTotal, outcome: &vllmOutcomes, from: sources("vllm:request_success_total")},
		// Refused at admission (0.32: a full queue answers 503), so never
		// among the finished requests above.
		{family: requestsTotal, set: label{outcomeLabel, outcomeRejected}, from: sources("vllm:admission_rejections_total")},
		{family: preemptionsTotal, from: sources("vllm:num_preemptions_total")},
	},
}

// vllmOutcomes reads request_success_total, which counts every finished
// request by finish reason, aborted ones included. A reason added by a later
// release counts as a success, as the counter's name says.
var vllmOutcomes = outcomes{
	label: "finished_reason",
	values: map[string]string{
		"stop":   outcomeSuccess,
		"length": outcomeSuccess,
		"abort":  outcomeAborted,
		"error":  outcomeError,
	},
	other: outcomeSuccess,
}
