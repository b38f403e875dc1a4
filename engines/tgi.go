package engines

import "strings"

// tgiSpec covers HuggingFace Text Generation Inference. TGI labels nothing
// with the model: the caller's default model names it.
var tgiSpec = spec{
	owns: func(name string) bool { return strings.HasPrefix(name, "tgi_") },
	mappings: []mapping{
		{family: requestsRunning, from: sources("tgi_batch_current_size")},
		{family: requestsWaiting, from: sources("tgi_queue_size")},
		// TGI has no token counters; the sums of its per-request length
		// histograms are the totals of the requests it recorded.
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypePrompt}, from: []source{{name: "tgi_request_input_length", hsum: true}}},
		{family: tokensTotal, set: label{tokenTypeLabel, tokenTypeGeneration}, from: []source{{name: "tgi_request_generated_tokens", hsum: true}}},
		// The mean covers the whole inference, prefill included, so it is
		// not an inter-token latency.
		{family: timePerOutputToken, from: sources("tgi_request_mean_time_per_token_duration")},
		{family: requestDuration, from: sources("tgi_request_duration")},
		{family: queueTime, from: sources("tgi_request_queue_duration")},
		{family: requestsTotal, set: label{outcomeLabel, outcomeSuccess}, from: sources("tgi_request_success")},
		{family: requestsTotal, outcome: &tgiOutcomes, from: sources("tgi_request_failure")},
	},
}

// tgiOutcomes reads the err label of tgi_request_failure.
var tgiOutcomes = outcomes{
	label: "err",
	values: map[string]string{
		"validation": outcomeRejected,
		"overloaded": outcomeRejected,
		"dropped":    outcomeAborted,
		"cancelled":  outcomeAborted,
	},
	other: outcomeError,
}
