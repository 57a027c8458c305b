package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// startServer serves cfg on a loopback port and returns its base URL.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	// Runs before the shutdown above (cleanups run last-in first-out): the
	// client may hold connections it dialed but never used, which the server
	// counts as active until they time out.
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return "http://" + l.Addr().String()
}

func spec(t *testing.T, name string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "specs", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, url string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// expectError checks status and that the JSON error's message contains needle.
func expectError(t *testing.T, resp *http.Response, body []byte, status int, code, needle string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body is not JSON: %s", body)
	}
	if e.Error.Code != code || !strings.Contains(e.Error.Message, needle) {
		t.Fatalf("error %+v, want code %q message containing %q", e.Error, code, needle)
	}
}

func TestPlanBytesOverHTTP(t *testing.T) {
	base := startServer(t, NewServer(DefaultConfig()))
	resp, body := post(t, base+"/v1/plan", spec(t, "partial_sums.json"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	plan, err := reshard.PlanFromBytes(body)
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	if got := fmt.Sprintf("%016x", plan.Fingerprint()); got != resp.Header.Get("X-Reshard-Fingerprint") {
		t.Fatalf("fingerprint header %q, bytes %s", resp.Header.Get("X-Reshard-Fingerprint"), got)
	}
	view, err := reshard.ViewPlan(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(view.Parts()) != len(plan.Processes()) {
		t.Fatal("bytes lack parts")
	}
	ex, _ := reshard.NewExecutor(nil)
	defer ex.Close()
	if r, err := ex.Verify(plan); err != nil || r.Mismatches != 0 {
		t.Fatalf("verify: %+v %v", r, err)
	}
	resp, _ = http.Get(base + "/healthz")
	if resp.StatusCode != http.StatusOK {
		t.Fatal("healthz")
	}
	resp.Body.Close()
}

func TestPlanStatsAsJSON(t *testing.T) {
	base := startServer(t, NewServer(DefaultConfig()))
	for _, c := range []struct {
		url    string
		header []string
	}{
		{base + "/v1/plan?format=json", nil},
		{base + "/v1/plan", []string{"Accept", "application/json"}},
	} {
		resp, body := post(t, c.url, spec(t, "small_transformer.json"), c.header...)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: status %d: %s", c.url, resp.StatusCode, body)
		}
		var got statsBody
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Stats.NetworkBytes == 0 || got.Stats.NetworkBytes != got.Stats.LowerBoundNetworkBytes || got.Gap != 1 ||
			got.Tensors == 0 || len(got.Devices) != int(got.Stats.NumDevices) || got.Fingerprint != resp.Header.Get("X-Reshard-Fingerprint") {
			t.Fatalf("stats %+v", got)
		}
	}
}

func TestWorkerPartOverHTTP(t *testing.T) {
	base := startServer(t, NewServer(DefaultConfig()))
	resp, body := post(t, base+"/v1/plan?process=1", spec(t, "small_transformer.json"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	view, err := reshard.ViewPlan(body)
	if err != nil {
		t.Fatal(err)
	}
	if parts := view.Parts(); len(parts) != 1 || parts[0].Process() != 1 {
		t.Fatalf("parts %v", parts)
	}
	resp, body = post(t, base+"/v1/plan?process=99", spec(t, "small_transformer.json"))
	expectError(t, resp, body, http.StatusBadRequest, "out_of_range", "process")
}

// A server with a key signs what it serves; a worker with the key reads
// the bytes, and refuses them unsigned, under another key, or changed.
func TestSignedPlansOverHTTP(t *testing.T) {
	key := bytes.Repeat([]byte{0x42}, 32)
	cfg := DefaultConfig()
	cfg.Key = key
	base := startServer(t, NewServer(cfg))
	for _, q := range []string{"", "?process=1"} {
		resp, body := post(t, base+"/v1/plan"+q, spec(t, "small_transformer.json"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		plan, err := reshard.PlanFromSignedBytes(body, key)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		plan.Close()
		var e *reshard.Error
		err = reshard.VerifySignedPlanBytes(body, bytes.Repeat([]byte{0x43}, 32))
		if !errors.As(err, &e) || e.Code != reshard.Corrupt || !strings.Contains(e.Message, "mac: does not match") {
			t.Fatalf("another key: %v", err)
		}
		body[len(body)/3] ^= 1
		if err := reshard.VerifySignedPlanBytes(body, key); !errors.As(err, &e) || !strings.Contains(e.Message, "mac: does not match") {
			t.Fatalf("changed bytes: %v", err)
		}
	}
	unsigned := startServer(t, NewServer(DefaultConfig()))
	_, body := post(t, unsigned+"/v1/plan", spec(t, "small_transformer.json"))
	var e *reshard.Error
	if err := reshard.VerifySignedPlanBytes(body, key); !errors.As(err, &e) || !strings.Contains(e.Message, "mac: missing") {
		t.Fatalf("unsigned bytes: %v", err)
	}
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(short); err == nil || !strings.Contains(err.Error(), "10 bytes") {
		t.Fatalf("short key: %v", err)
	}
}

// Every part of a fleet-scale plan (1,024 processes, 2.5 billion pieces)
// gets 422 with the library's estimate within seconds, instead of a
// planning that exhausts memory; one process's part of it is served.
func TestFleetScalePlanIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPlanBytes = 4 << 30 // machine-independent; far below the estimate
	base := startServer(t, NewServer(cfg))
	fleet := spec(t, "llama405b_fsdp1024_to_tp8.json")
	start := time.Now()
	resp, body := post(t, base+"/v1/plan", fleet)
	expectError(t, resp, body, http.StatusUnprocessableEntity, "resource_exhausted",
		"request->max_plan_bytes: the 1,024 process parts of this plan need about ")
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the refusal took %s", time.Since(start))
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" pieces, ", " messages, ", " as plan bytes), above the limit of 4.00 GiB (4,294,967,296 bytes)", "RESHARD_PLAN_SCOPE_PROCESS: at most "} {
		if !strings.Contains(e.Error.Message, want) {
			t.Fatalf("message %q lacks %q", e.Error.Message, want)
		}
	}
	if !strings.Contains(e.Error.Hint, "?process=N") {
		t.Fatalf("hint %q", e.Error.Hint)
	}
	// The statistics are never refused.
	resp, body = post(t, base+"/v1/plan?format=json", fleet)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("statistics: status %d: %s", resp.StatusCode, body)
	}
	// One worker's part fits, and is the part asked for.
	resp, body = post(t, base+"/v1/plan?process=7", fleet)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("process 7: status %d: %.300s", resp.StatusCode, body)
	}
	view, err := reshard.ViewPlan(body)
	if err != nil {
		t.Fatal(err)
	}
	if parts := view.Parts(); len(parts) != 1 || parts[0].Process() != 7 {
		t.Fatalf("parts %v", parts)
	}
	// A worker's part above a tiny limit: 422 without the ?process hint.
	s := NewServer(Config{MaxPlanBytes: 1})
	resp, body = post(t, startServer(t, s)+"/v1/plan?process=1", spec(t, "small_transformer.json"))
	expectError(t, resp, body, http.StatusUnprocessableEntity, "resource_exhausted", "process 1's part needs about")
	var one errorBody
	if err := json.Unmarshal(body, &one); err != nil || one.Error.Hint != "" {
		t.Fatalf("hint for a single part: %s", body)
	}
}

func TestBadRequests(t *testing.T) {
	s := NewServer(Config{MaxBodyBytes: 4096})
	base := startServer(t, s)
	resp, body := post(t, base+"/v1/plan", []byte(`{"meshes": `))
	expectError(t, resp, body, http.StatusBadRequest, "parse_error", "line 1")
	bad := strings.Replace(string(spec(t, "partial_sums.json")), `"tp"]`, `"tq"]`, 1)
	resp, body = post(t, base+"/v1/plan", []byte(bad))
	expectError(t, resp, body, http.StatusBadRequest, "invalid_argument", "tq")
	resp, body = post(t, base+"/v1/plan?format=xml", spec(t, "partial_sums.json"))
	expectError(t, resp, body, http.StatusBadRequest, "invalid_argument", "format")
	resp, body = post(t, base+"/v1/plan?process=-3", spec(t, "partial_sums.json"))
	expectError(t, resp, body, http.StatusBadRequest, "invalid_argument", "process")
	resp, body = post(t, base+"/v1/plan", bytes.Repeat([]byte(" "), 5000))
	expectError(t, resp, body, http.StatusRequestEntityTooLarge, "too_large", "4096")
	get, err := http.Get(base + "/v1/plan")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(get.Body)
	get.Body.Close()
	expectError(t, get, b, http.StatusMethodNotAllowed, "method_not_allowed", "POST")
	if get.Header.Get("Allow") != http.MethodPost {
		t.Fatal("Allow header")
	}
	// Issue 15: 40,000 nested arrays fit the default 1 MiB body; the parser
	// refuses past 64 levels with memory linear in the input.
	deep := NewServer(Config{})
	deepBase := startServer(t, deep)
	nested := strings.Repeat("[", 40000) + strings.Repeat("]", 40000)
	resp, body = post(t, deepBase+"/v1/plan", []byte(nested))
	expectError(t, resp, body, http.StatusBadRequest, "parse_error", "nesting depth exceeds 64")
	// Issue 37 finding 4: finite options whose estimate is infinite were
	// answered 200 with bytes no reader accepts; now a 400 naming the option.
	for _, opt := range []string{`"alpha_seconds": 1e308`, `"inter_host_bytes_per_second": 5e-324`} {
		withOpt := strings.Replace(string(spec(t, "partial_sums.json")), "{", `{"options": {`+opt+`}, `, 1)
		resp, body = post(t, base+"/v1/plan", []byte(withOpt))
		expectError(t, resp, body, http.StatusBadRequest, "invalid_argument", "options."+strings.Split(opt, `"`)[1])
	}
	// The server still plans after all that.
	resp, body = post(t, base+"/v1/plan?format=json", spec(t, "partial_sums.json"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestPlanningTimeIsBounded(t *testing.T) {
	s := NewServer(Config{PlanTimeout: 100 * time.Millisecond, MaxConcurrent: 1})
	release := make(chan struct{})
	var calls sync.WaitGroup
	s.plan = func(planRequest) (*planResult, error) {
		calls.Add(1)
		defer calls.Done()
		<-release // a planning that takes too long
		return &planResult{}, nil
	}
	base := startServer(t, s)
	start := time.Now()
	resp, body := post(t, base+"/v1/plan", spec(t, "partial_sums.json"))
	expectError(t, resp, body, http.StatusServiceUnavailable, "timeout", "no plan within 100ms")
	if resp.Header.Get("Retry-After") == "" || time.Since(start) > 5*time.Second {
		t.Fatal("timeout answer")
	}
	// The abandoned planning still holds the only slot: the next request
	// is refused as busy, not queued without bound.
	resp, body = post(t, base+"/v1/plan", spec(t, "partial_sums.json"))
	expectError(t, resp, body, http.StatusServiceUnavailable, "busy", "no free slot")
	close(release)
	calls.Wait()
}

func TestConcurrentRequests(t *testing.T) {
	base := startServer(t, NewServer(Config{MaxConcurrent: 2}))
	body := spec(t, "explicit_boxes.json")
	var wg sync.WaitGroup
	fps := make(chan string, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(base+"/v1/plan", "application/json", bytes.NewReader(body))
			if err != nil {
				fps <- err.Error()
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			fps <- fmt.Sprint(resp.StatusCode, resp.Header.Get("X-Reshard-Fingerprint"))
		}()
	}
	wg.Wait()
	close(fps)
	var first string
	for fp := range fps {
		if first == "" {
			first = fp
		}
		if fp != first || !strings.HasPrefix(fp, "200") {
			t.Fatalf("answers differ: %q vs %q", fp, first)
		}
	}
}

// TestBytesCrossLanguages: plan bytes served over HTTP are read by the C++
// side (`reshard verify --plan FILE`, the CLI named by RESHARD_CLI) and left
// in RESHARD_XLANG_DIR for the Rust tests.
func TestBytesCrossLanguages(t *testing.T) {
	cli, dir := os.Getenv("RESHARD_CLI"), os.Getenv("RESHARD_XLANG_DIR")
	if cli == "" && dir == "" {
		t.Skip("neither RESHARD_CLI nor RESHARD_XLANG_DIR is set (scripts/test-bindings.sh sets them)")
	}
	base := startServer(t, NewServer(DefaultConfig()))
	resp, body := post(t, base+"/v1/plan", spec(t, "partial_sums.json"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	path := filepath.Join(t.TempDir(), "planserver.rsplan")
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, "planserver.rsplan")
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if cli == "" {
		t.Log("RESHARD_CLI is not set: the Rust tests read", path)
		return
	}
	help, _ := exec.Command(cli, "verify", "--help").CombinedOutput()
	if !strings.Contains(string(help), "--plan") {
		t.Skipf("%s verify has no --plan option yet; the Rust tests read %s instead", cli, path)
	}
	out, err := exec.Command(cli, "verify", "--plan", path).CombinedOutput()
	if err != nil {
		t.Fatalf("%s verify --plan %s: %v\n%s", cli, path, err, out)
	}
	t.Logf("%s verify --plan: %s", cli, strings.TrimSpace(string(out)))
}
