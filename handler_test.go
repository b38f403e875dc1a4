package main

import "testing"

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                             false,
		"gzip":                         true,
		"GZIP":                         true,
		"deflate, gzip;q=1.0, *;q=0.5": true, // Prometheus' header
		"identity":                     false,
		"gzip;q=0":                     false,
		"gzip; q=0.001":                true,
		"*":                            true,
		"*;q=0":                        false,
		"gzip;q=0, *":                  false, // named refusal beats the wildcard
		"br, *;q=0.1":                  true,
		"x-gzip":                       true,
	} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}
