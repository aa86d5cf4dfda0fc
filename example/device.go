package main

import "strings"

// Fallbacks of deviceLabel for what a User-Agent does not say.
const (
	unknownBrowser = "Unknown browser"
	unknownDevice  = "unknown device"
)

// uaMarker maps a token of the User-Agent header to a name for people.
type uaMarker struct {
	token, name string
}

// browserMarkers name the browser, most specific first: Edge, Opera and
// Samsung Internet say "Chrome" too, Chrome says "Safari", and Firefox and
// Chrome on iOS say neither "Firefox/" nor "Chrome/".
var browserMarkers = []uaMarker{
	{"Edg/", "Edge"}, {"EdgA/", "Edge"}, {"EdgiOS/", "Edge"}, {"Edge/", "Edge"},
	{"OPR/", "Opera"}, {"OPiOS/", "Opera"}, {"Opera", "Opera"},
	{"SamsungBrowser/", "Samsung Internet"},
	{"Vivaldi/", "Vivaldi"},
	{"YaBrowser/", "Yandex Browser"},
	{"Firefox/", "Firefox"}, {"FxiOS/", "Firefox"},
	{"CriOS/", "Chrome"}, {"Chromium/", "Chromium"}, {"Chrome/", "Chrome"}, // also HeadlessChrome/
	{"Safari/", "Safari"},
	{"MSIE ", "Internet Explorer"}, {"Trident/", "Internet Explorer"},
}

// osMarkers name the device or its system, most specific first: Android
// says "Linux", and iPhones and iPads say "like Mac OS X".
var osMarkers = []uaMarker{
	{"iPhone", "iPhone"}, {"iPad", "iPad"}, {"iPod", "iPod"},
	{"Android", "Android"},
	{"CrOS", "ChromeOS"},
	{"Windows", "Windows"},
	{"Macintosh", "macOS"}, {"Mac OS X", "macOS"},
	{"Linux", "Linux"},
	{"FreeBSD", "FreeBSD"}, {"OpenBSD", "OpenBSD"}, {"NetBSD", "NetBSD"},
}

// deviceLabel turns a User-Agent header into a short label for people, to
// tell their sessions apart: "Firefox on Linux", "Safari on iPhone",
// "Unknown browser on Windows", "Unknown browser on unknown device". The
// label is made of fixed names only, never of the header's text, so it
// holds nothing that identifies a person or a machine beyond the kind of
// browser and system, and nothing a client can inject into the page.
func deviceLabel(userAgent string) string {
	browser := firstMarker(userAgent, browserMarkers)
	if browser == "" {
		browser = unknownBrowser
	}
	system := firstMarker(userAgent, osMarkers)
	if system == "" {
		system = unknownDevice
	}
	return browser + " on " + system
}

// firstMarker returns the name of the first marker whose token ua
// contains, or "".
func firstMarker(ua string, markers []uaMarker) string {
	for _, m := range markers {
		if strings.Contains(ua, m.token) {
			return m.name
		}
	}
	return ""
}
