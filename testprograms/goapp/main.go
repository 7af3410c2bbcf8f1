// Command goapp is a small HTTP service that spanprof's integration tests profile.
//
// It serves net/http/pprof under /debug/pprof/ and does real work inside pprof.Do with
// trace/span labels, so that the CPU and goroutine profiles it writes carry the labels that
// spanprof turns into OTLP links:
//
//	GET /cpu-heavy  countPrimes under otel.profile.{trace_id,span_id,span_name},
//	                with a child span (same trace, new span id) running sortWork
//	GET /cpu-light  hashLoop under the Pyroscope keys trace_id, span_id, span_name;
//	                with ?keys=custom under custom.trace_id, custom.span_id, custom.span_name
//	                instead (keys no linker knows by default)
//	GET /alloc      allocates (and keeps some of) memory under labels
//
// Each request gets fresh random ids, returned in X-Trace-Id / X-Span-Id (and X-Child-Span-Id
// for /cpu-heavy). With -pprof-auth, /debug/pprof/ answers only requests bearing one of the
// Authorization values given (401 otherwise), as a service guarding it would. Background
// goroutines contend a mutex and block on channels so that the mutex and block profiles are
// never empty. The standard library only: tests run offline.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	otlp := flag.String("otlp", "", "OTLP/HTTP base URL; when set, each request's spans are POSTed as JSON to URL/v1/traces")
	spansFile := flag.String("spans-file", "", "append each request's spans to this file as OTLP JSON, one request per line (spanprof import --spans reads it)")
	load := flag.Duration("load", 0, "generate load against this server for this long (0 = none)")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this certificate (PEM; with -tls-key)")
	tlsKey := flag.String("tls-key", "", "the key of -tls-cert (PEM)")
	tlsClientCA := flag.String("tls-client-ca", "", "with -tls-cert: serve only clients showing a certificate this CA (PEM) signed (mutual TLS)")
	pprofAuth := flag.String("pprof-auth", "", "serve /debug/pprof/ only to requests whose Authorization header is one of these comma-separated values (401 otherwise)")
	flag.Parse()

	// Record every contention and blocking event: the test service is small, and the
	// profiles must be non-empty after a few seconds.
	runtime.SetMutexProfileFraction(1)
	runtime.SetBlockProfileRate(1)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen %s: %v", *addr, err)
	}
	scheme := "http"
	if *tlsCert != "" {
		scheme = "https"
	}
	base := scheme + "://" + ln.Addr().String()

	exporter := newSpanExporter(*otlp)
	if *spansFile != "" {
		f, err := os.OpenFile(*spansFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatalf("spans file: %v", err)
		}
		if exporter == nil {
			exporter = &spanExporter{}
		}
		exporter.file = f
	}
	app := &app{exporter: exporter}
	mux := http.NewServeMux()
	guard := authorized(*pprofAuth)
	mux.HandleFunc("/debug/pprof/", guard(httppprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", guard(httppprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", guard(httppprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", guard(httppprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", guard(httppprof.Trace))
	mux.HandleFunc("/cpu-heavy", app.cpuHeavy)
	mux.HandleFunc("/cpu-light", app.cpuLight)
	mux.HandleFunc("/alloc", app.alloc)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

	startContention()
	if *load > 0 && scheme == "http" {
		go generateLoad(base, *load)
	}

	// Tests read the port from this line; os.Stdout is unbuffered.
	fmt.Printf("listening on %s\n", base)
	if scheme == "https" {
		server := &http.Server{Handler: mux}
		if *tlsClientCA != "" {
			pem, err := os.ReadFile(*tlsClientCA)
			if err != nil {
				log.Fatalf("client CA: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				log.Fatalf("client CA %s: no certificate", *tlsClientCA)
			}
			server.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
		}
		log.Fatal(server.ServeTLS(ln, *tlsCert, *tlsKey))
	}
	log.Fatal(http.Serve(ln, mux))
}

// authorized wraps handlers so that they answer only requests whose Authorization header is
// one of the comma-separated values in allowed (every request when it is empty).
func authorized(allowed string) func(http.HandlerFunc) http.HandlerFunc {
	return func(h http.HandlerFunc) http.HandlerFunc {
		if allowed == "" {
			return h
		}
		return func(w http.ResponseWriter, r *http.Request) {
			for _, v := range strings.Split(allowed, ",") {
				if r.Header.Get("Authorization") == v {
					h(w, r)
					return
				}
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="pprof"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	}
}

type app struct {
	exporter *spanExporter
}

// cpuHeavy burns CPU in countPrimes under the OTel label convention and runs a child span.
func (a *app) cpuHeavy(w http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 600000)
	traceID, spanID, childID := randomHex(16), randomHex(8), randomHex(8)
	start := time.Now()
	var childStart, childEnd time.Time
	var primes, sorted int
	labels := pprof.Labels(
		"otel.profile.trace_id", traceID,
		"otel.profile.span_id", spanID,
		"otel.profile.span_name", "GET /cpu-heavy",
	)
	pprof.Do(r.Context(), labels, func(ctx context.Context) {
		primes = countPrimes(n)
		// A nested pprof.Do keeps the trace id and replaces the span id and name.
		child := pprof.Labels("otel.profile.span_id", childID, "otel.profile.span_name", "sortWork")
		childStart = time.Now()
		pprof.Do(ctx, child, func(context.Context) { sorted = sortWork(n / 4) })
		childEnd = time.Now()
	})
	end := time.Now()
	w.Header().Set("X-Trace-Id", traceID)
	w.Header().Set("X-Span-Id", spanID)
	w.Header().Set("X-Child-Span-Id", childID)
	fmt.Fprintf(w, "primes below %d: %d; sorted %d\n", n, primes, sorted)
	a.exporter.export(
		span{traceID, spanID, "", "GET /cpu-heavy", 2, start, end},
		span{traceID, childID, spanID, "sortWork", 1, childStart, childEnd},
	)
}

// cpuLight does less work in hashLoop under the Pyroscope label convention.
func (a *app) cpuLight(w http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 100000)
	traceID, spanID := randomHex(16), randomHex(8)
	start := time.Now()
	var sum []byte
	labels := pprof.Labels("trace_id", traceID, "span_id", spanID, "span_name", "GET /cpu-light")
	if r.URL.Query().Get("keys") == "custom" {
		labels = pprof.Labels(
			"custom.trace_id", traceID,
			"custom.span_id", spanID,
			"custom.span_name", "GET /cpu-light",
		)
	}
	pprof.Do(r.Context(), labels, func(context.Context) { sum = hashLoop(n) })
	end := time.Now()
	w.Header().Set("X-Trace-Id", traceID)
	w.Header().Set("X-Span-Id", spanID)
	fmt.Fprintf(w, "hash after %d rounds: %x\n", n, sum)
	a.exporter.export(span{traceID, spanID, "", "GET /cpu-light", 2, start, end})
}

// retained keeps a bounded share of /alloc's allocations alive so the heap profile's
// in-use values are not all zero.
var (
	retainedMu sync.Mutex
	retained   [][]byte
)

func (a *app) alloc(w http.ResponseWriter, r *http.Request) {
	n := intParam(r, "n", 2000)
	traceID, spanID := randomHex(16), randomHex(8)
	start := time.Now()
	var total int
	labels := pprof.Labels(
		"otel.profile.trace_id", traceID,
		"otel.profile.span_id", spanID,
		"otel.profile.span_name", "GET /alloc",
	)
	pprof.Do(r.Context(), labels, func(context.Context) { total = allocWork(n) })
	end := time.Now()
	w.Header().Set("X-Trace-Id", traceID)
	w.Header().Set("X-Span-Id", spanID)
	fmt.Fprintf(w, "allocated %d bytes\n", total)
	a.exporter.export(span{traceID, spanID, "", "GET /alloc", 2, start, end})
}

//go:noinline
func countPrimes(n int) int {
	count := 0
	for i := 2; i < n; i++ {
		prime := true
		for d := 2; d*d <= i; d++ {
			if i%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			count++
		}
	}
	return count
}

//go:noinline
func sortWork(n int) int {
	xs := make([]int, n)
	seed := uint32(2463534242)
	for i := range xs {
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		xs[i] = int(seed)
	}
	sort.Ints(xs)
	return len(xs)
}

//go:noinline
func hashLoop(n int) []byte {
	sum := sha256.Sum256([]byte("spanprof"))
	for i := 0; i < n; i++ {
		sum = sha256.Sum256(sum[:])
	}
	return sum[:]
}

//go:noinline
func allocWork(n int) int {
	total := 0
	var keep [][]byte
	for i := 0; i < n; i++ {
		b := make([]byte, 1024+i%4096)
		b[0] = byte(i)
		total += len(b)
		if i%64 == 0 {
			keep = append(keep, b)
		}
	}
	retainedMu.Lock()
	retained = append(retained, keep...)
	if len(retained) > 4096 {
		retained = retained[len(retained)-4096:]
	}
	retainedMu.Unlock()
	return total
}

// startContention runs goroutines that fight over one mutex and hand work over unbuffered
// channels, at a low CPU cost, so the mutex and block profiles always have samples.
func startContention() {
	ctx := pprof.WithLabels(context.Background(), pprof.Labels("worker", "contention"))
	var mu sync.Mutex
	for i := 0; i < 2; i++ {
		go pprof.Do(ctx, pprof.Labels("worker", "contention-"+strconv.Itoa(i)), func(context.Context) {
			for {
				holdLock(&mu)
			}
		})
	}
	ch := make(chan int)
	go pprof.Do(ctx, pprof.Labels("worker", "producer"), func(context.Context) {
		for i := 0; ; i++ {
			time.Sleep(2 * time.Millisecond)
			ch <- i
		}
	})
	go pprof.Do(ctx, pprof.Labels("worker", "consumer"), func(context.Context) {
		for v := range ch {
			_ = v
		}
	})
}

//go:noinline
func holdLock(mu *sync.Mutex) {
	mu.Lock()
	time.Sleep(time.Millisecond)
	mu.Unlock()
}

// generateLoad calls this server's handlers in the background until d has passed.
func generateLoad(base string, d time.Duration) {
	deadline := time.Now().Add(d)
	client := &http.Client{Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for _, path := range []string{"/cpu-heavy", "/cpu-light", "/alloc"} {
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				resp, err := client.Get(url)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				resp.Body.Close()
			}
		}(base + path)
	}
	wg.Wait()
}

func intParam(r *http.Request, name string, def int) int {
	if v, err := strconv.Atoi(r.URL.Query().Get(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	// All-zero ids are invalid in OTLP; the chance is negligible but make it impossible.
	b[0] |= 1
	return hex.EncodeToString(b)
}

type span struct {
	traceID, spanID, parentSpanID, name string
	kind                                int
	start, end                          time.Time
}

// spanExporter POSTs spans as OTLP/HTTP JSON and/or appends them to a file, one request per
// line. Errors are ignored: the collector may not exist.
type spanExporter struct {
	url    string
	client *http.Client
	fileMu sync.Mutex
	file   *os.File
}

func newSpanExporter(base string) *spanExporter {
	if base == "" {
		return nil
	}
	return &spanExporter{url: base + "/v1/traces", client: &http.Client{Timeout: 5 * time.Second}}
}

func (e *spanExporter) export(spans ...span) {
	if e == nil {
		return
	}
	body, err := json.Marshal(otlpTraces(spans))
	if err != nil {
		return
	}
	if e.file != nil {
		e.fileMu.Lock()
		e.file.Write(append(body, '\n'))
		e.fileMu.Unlock()
	}
	if e.url == "" {
		return
	}
	go func() {
		resp, err := e.client.Post(e.url, "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
}

// The OTLP/HTTP JSON encoding: lowerCamelCase keys, ids as hex, 64-bit integers as strings.
type (
	otlpTracesData struct {
		ResourceSpans []otlpResourceSpans `json:"resourceSpans"`
	}
	otlpResourceSpans struct {
		Resource   otlpResource     `json:"resource"`
		ScopeSpans []otlpScopeSpans `json:"scopeSpans"`
	}
	otlpResource struct {
		Attributes []otlpKeyValue `json:"attributes"`
	}
	otlpKeyValue struct {
		Key   string       `json:"key"`
		Value otlpAnyValue `json:"value"`
	}
	otlpAnyValue struct {
		StringValue string `json:"stringValue"`
	}
	otlpScopeSpans struct {
		Scope otlpScope  `json:"scope"`
		Spans []otlpSpan `json:"spans"`
	}
	otlpScope struct {
		Name string `json:"name"`
	}
	otlpSpan struct {
		TraceID           string `json:"traceId"`
		SpanID            string `json:"spanId"`
		ParentSpanID      string `json:"parentSpanId,omitempty"`
		Name              string `json:"name"`
		Kind              int    `json:"kind"`
		StartTimeUnixNano string `json:"startTimeUnixNano"`
		EndTimeUnixNano   string `json:"endTimeUnixNano"`
	}
)

func otlpTraces(spans []span) otlpTracesData {
	out := make([]otlpSpan, 0, len(spans))
	for _, s := range spans {
		out = append(out, otlpSpan{
			TraceID:           s.traceID,
			SpanID:            s.spanID,
			ParentSpanID:      s.parentSpanID,
			Name:              s.name,
			Kind:              s.kind,
			StartTimeUnixNano: strconv.FormatInt(s.start.UnixNano(), 10),
			EndTimeUnixNano:   strconv.FormatInt(s.end.UnixNano(), 10),
		})
	}
	return otlpTracesData{ResourceSpans: []otlpResourceSpans{{
		Resource: otlpResource{Attributes: []otlpKeyValue{
			{Key: "service.name", Value: otlpAnyValue{StringValue: serviceName()}},
			{Key: "telemetry.sdk.language", Value: otlpAnyValue{StringValue: "go"}},
			{Key: "process.runtime.version", Value: otlpAnyValue{StringValue: runtime.Version()}},
			{Key: "process.pid", Value: otlpAnyValue{StringValue: strconv.Itoa(os.Getpid())}},
		}},
		ScopeSpans: []otlpScopeSpans{{Scope: otlpScope{Name: "spanprof.test/goapp"}, Spans: out}},
	}}}
}

func serviceName() string {
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		return v
	}
	return "goapp"
}
