package oteltest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/mongostore/mongostore"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkLoadSave is a request's load and save of a stored session with
// no provider installed (the global ones, which do nothing) and with the
// SDK's providers recording every span (sampled, not exported) and
// metric: what telemetry costs. Run it with -count to interleave.
func BenchmarkLoadSave(b *testing.B) {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")).SetTimeout(30 * time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	for _, p := range []struct {
		name string
		cfg  func() mongostore.Config
	}{
		{"no provider", func() mongostore.Config { return mongostore.Config{} }},
		{"SDK", func() mongostore.Config {
			return mongostore.Config{
				TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())),
				MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
			}
		}},
	} {
		b.Run(p.name, func(b *testing.B) {
			coll := client.Database(testDatabase).Collection(fmt.Sprintf("bench_%d_%d", os.Getpid(), seq.Add(1)))
			b.Cleanup(func() { _ = coll.Drop(context.Background()) })
			cfg := p.cfg()
			cfg.Expiry = mongostore.ExpiryNone
			store, err := mongostore.NewStore(context.Background(), coll, cfg, testHashKey)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = store.Close() })
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			s, _ := store.New(req, "s")
			s.Values["user"], s.Values["n"] = "ada", 0
			w := httptest.NewRecorder()
			if err := store.Save(req, w, s); err != nil {
				b.Fatal(err)
			}
			cookie := w.Result().Cookies()[0]
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.AddCookie(cookie)
				s, err := store.New(r, "s")
				if err != nil || s.IsNew {
					b.Fatalf("load: new %v, %v", s.IsNew, err)
				}
				n++
				s.Values["n"] = n
				if err := store.Save(r, httptest.NewRecorder(), s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
