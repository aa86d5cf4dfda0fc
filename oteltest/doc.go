// Package oteltest tests the store's OpenTelemetry spans and metrics with
// the OpenTelemetry SDK and in-memory exporters. It is a module of its own
// so that the library's go.mod never requires the SDK.
package oteltest
