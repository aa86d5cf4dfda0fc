package main

import (
	"strings"
	"testing"
)

func TestDeviceLabel(t *testing.T) {
	for _, tc := range []struct {
		name, ua, want string
	}{
		{"Firefox on Linux", "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "Firefox on Linux"},
		{"Firefox on Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0", "Firefox on Windows"},
		{"Firefox on Android", "Mozilla/5.0 (Android 14; Mobile; rv:133.0) Gecko/133.0 Firefox/133.0", "Firefox on Android"},
		{"Firefox on iPhone", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) FxiOS/133.0 Mobile/15E148 Safari/605.1.15", "Firefox on iPhone"},
		{"Chrome on Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Chrome on Windows"},
		{"Chrome on Android", "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36", "Chrome on Android"},
		{"Chrome on macOS", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Chrome on macOS"},
		{"Chrome on iPad", "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1", "Chrome on iPad"},
		{"Chrome on ChromeOS", "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Chrome on ChromeOS"},
		{"headless Chrome", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36", "Chrome on Linux"},
		{"Chromium on Linux", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chromium/120.0.0.0 Chrome/120.0.0.0 Safari/537.36", "Chromium on Linux"},
		{"Safari on iPhone", "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", "Safari on iPhone"},
		{"Safari on macOS", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "Safari on macOS"},
		{"Edge on Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", "Edge on Windows"},
		{"Edge on Android", "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36 EdgA/131.0.0.0", "Edge on Android"},
		{"Opera on Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 OPR/115.0.0.0", "Opera on Windows"},
		{"Samsung Internet", "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36", "Samsung Internet on Android"},
		{"Internet Explorer", "Mozilla/5.0 (Windows NT 10.0; WOW64; Trident/7.0; rv:11.0) like Gecko", "Internet Explorer on Windows"},
		{"Go client", "Go-http-client/1.1", "Unknown browser on unknown device"},
		{"curl", "curl/8.5.0", "Unknown browser on unknown device"},
		{"empty", "", "Unknown browser on unknown device"},
		{"unknown browser on Linux", "Mozilla/5.0 (X11; Linux x86_64) SomeBrowser/1.0", "Unknown browser on Linux"},
		{"known browser, unknown system", "Mozilla/5.0 (Plan 9) Gecko/20100101 Firefox/128.0", "Firefox on unknown device"},
		{"markup", `<script>alert(1)</script> Firefox/1 "Linux"`, "Firefox on Linux"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deviceLabel(tc.ua); got != tc.want {
				t.Errorf("deviceLabel(%q) = %q, want %q", tc.ua, got, tc.want)
			}
		})
	}
}

// TestDeviceLabelShort checks that a label never carries the header's
// text: a long or hostile User-Agent gives a short label of fixed names.
func TestDeviceLabelShort(t *testing.T) {
	ua := "Mozilla/5.0 (X11; Linux x86_64; 192.0.2.1; user@example.com) " + strings.Repeat("x", 10000) + " Firefox/128.0"
	got := deviceLabel(ua)
	if got != "Firefox on Linux" {
		t.Errorf("deviceLabel of a long User-Agent = %q, want Firefox on Linux", got)
	}
	for _, tc := range []string{"", ua, "curl/8", "Go-http-client/1.1"} {
		if l := deviceLabel(tc); len(l) > 40 || strings.ContainsAny(l, "<>\"&/;()") {
			t.Errorf("deviceLabel(%.40q…) = %q: too long or not made of names", tc, l)
		}
	}
}
