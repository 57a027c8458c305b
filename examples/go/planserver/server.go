package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reshard/reshard/bindings/go/reshard"
)

// Config bounds what one request may cost.
type Config struct {
	// MaxBodyBytes caps the spec size; larger bodies get 413.
	MaxBodyBytes int64
	// PlanTimeout caps the wait for a plan; past it the request gets 503.
	PlanTimeout time.Duration
	// MaxConcurrent caps plannings running at once (a planning that timed
	// out keeps its slot until it finishes: the C call cannot be
	// interrupted). Requests that find no slot before PlanTimeout get 503.
	MaxConcurrent int
	// MaxPlanBytes caps the memory of one planning: the library estimates
	// it from the global statistics before building any process part, and a
	// request above it gets 422 with the estimate instead of a planning that
	// exhausts memory. 0: the library's default, half the memory available
	// (each of MaxConcurrent plannings may take that much: set
	// memory / (2 * MaxConcurrent) on a shared host); reshard.PlanBytesUnlimited:
	// none. Statistics (?format=json) are never refused.
	MaxPlanBytes int64
	// Logger receives one line per request (nil: none).
	Logger *log.Logger
	// Key, when set, signs every plan served (an HMAC-SHA-256 trailer,
	// docs/design.md §4; 16 to 1024 bytes, see LoadKey): workers read the
	// bytes with reshard.PlanFromSignedBytes(b, key) and refuse bytes that
	// are unsigned or were changed on the way.
	Key []byte
}

// LoadKey reads a MAC key file (its bytes, exactly) and checks its length
// before the server starts.
func LoadKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-key-file: %w", err)
	}
	if len(key) < 16 || len(key) > 1024 {
		return nil, fmt.Errorf("-key-file %s: %d bytes, a key has 16 to 1024 (head -c 32 /dev/urandom)", path, len(key))
	}
	return key, nil
}

// DefaultConfig: 1 MiB specs, 10 s per plan, 4 plannings at once.
func DefaultConfig() Config {
	return Config{MaxBodyBytes: 1 << 20, PlanTimeout: 10 * time.Second, MaxConcurrent: 4}
}

// planRequest is what a request asks for.
type planRequest struct {
	spec         []byte
	asJSON       bool
	process      int32  // -1: every part
	maxPlanBytes int64  // reshard.PlanRequest.MaxPlanBytes
	key          []byte // Config.Key: sign the bytes
}

// planResult is what a planning produced.
type planResult struct {
	bytes       []byte // plan bytes (format bytes)
	fingerprint uint64
	tensors     int
	processes   []int32
	stats       reshard.PlanStats
	devices     []reshard.DeviceTraffic
}

// Server answers POST /v1/plan with a JSON spec (docs/spec.md) in the body:
// the plan as FlatBuffers bytes (application/octet-stream), or with
// ?format=json or "Accept: application/json" its statistics as JSON.
// ?process=N returns only the part of process N (a worker's bytes).
type Server struct {
	cfg  Config
	sem  chan struct{}
	plan func(planRequest) (*planResult, error) // replaced in tests
}

// NewServer makes a server with cfg (zero fields take DefaultConfig's).
func NewServer(cfg Config) *Server {
	d := DefaultConfig()
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = d.MaxBodyBytes
	}
	if cfg.PlanTimeout <= 0 {
		cfg.PlanTimeout = d.PlanTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = d.MaxConcurrent
	}
	return &Server{cfg: cfg, sem: make(chan struct{}, cfg.MaxConcurrent), plan: makePlan}
}

// Handler routes /v1/plan and /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/plan", s.handlePlan)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok reshard %s\n", reshard.Version())
	})
	return mux
}

// Serve serves on l until ctx is done, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.PlanTimeout + 30*time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Hint    string `json:"hint,omitempty"` // what to ask for instead
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeErrorHint(w, status, code, message, "")
}

func writeErrorHint(w http.ResponseWriter, status int, code, message, hint string) {
	var b errorBody
	b.Error.Code = code
	b.Error.Message = message
	b.Error.Hint = hint
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}

func wantsJSON(r *http.Request) (bool, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "json":
		return true, nil
	case "bytes", "flatbuffers":
		return false, nil
	case "":
		return strings.Contains(r.Header.Get("Accept"), "application/json"), nil
	default:
		return false, fmt.Errorf("format: %q is not json or bytes", f)
	}
}

func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	status := s.servePlan(w, r)
	if s.cfg.Logger != nil {
		s.cfg.Logger.Printf("%s %s %d %s", r.Method, r.URL.RequestURI(), status, time.Since(start).Round(time.Microsecond))
	}
}

func (s *Server) servePlan(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST with a JSON spec in the body")
		return http.StatusMethodNotAllowed
	}
	req := planRequest{process: -1, maxPlanBytes: s.cfg.MaxPlanBytes, key: s.cfg.Key}
	var err error
	if req.asJSON, err = wantsJSON(r); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return http.StatusBadRequest
	}
	if p := r.URL.Query().Get("process"); p != "" {
		v, err := strconv.ParseInt(p, 10, 32)
		if err != nil || v < 0 {
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("process: %q is not a process rank", p))
			return http.StatusBadRequest
		}
		req.process = int32(v)
	}
	req.spec, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body: larger than %d bytes", tooBig.Limit))
			return http.StatusRequestEntityTooLarge
		}
		writeError(w, http.StatusBadRequest, "invalid_argument", "body: "+err.Error())
		return http.StatusBadRequest
	}

	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PlanTimeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", "planner: no free slot before the deadline")
		return http.StatusServiceUnavailable
	}
	type outcome struct {
		res *planResult
		err error
	}
	ch := make(chan outcome, 1) // buffered: an abandoned planning never blocks
	go func() {
		defer func() { <-s.sem }()
		res, err := s.plan(req)
		ch <- outcome{res, err}
	}()
	var out outcome
	select {
	case out = <-ch:
	case <-ctx.Done():
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "timeout",
			fmt.Sprintf("planner: no plan within %s", s.cfg.PlanTimeout))
		return http.StatusServiceUnavailable
	}
	if out.err != nil {
		var re *reshard.Error
		if errors.As(out.err, &re) {
			status := http.StatusBadRequest
			hint := ""
			switch re.Code {
			case reshard.OutOfMemory, reshard.Internal, reshard.Transport, reshard.Timeout:
				status = http.StatusInternalServerError
			case reshard.ResourceExhausted:
				// 422, not 413: the spec itself is small and valid (413 is
				// for bodies above MaxBodyBytes, and tells the client to
				// send less); what it asks for is too big to build here,
				// and the same spec with ?process=N is the way out.
				status = http.StatusUnprocessableEntity
				if req.process < 0 {
					hint = "ask for one process's part at a time: POST /v1/plan?process=N, or the statistics: ?format=json"
				}
			}
			writeErrorHint(w, status, re.Code.String(), re.Message, hint)
			return status
		}
		writeError(w, http.StatusInternalServerError, "internal", out.err.Error())
		return http.StatusInternalServerError
	}
	res := out.res
	w.Header().Set("X-Reshard-Fingerprint", fmt.Sprintf("%016x", res.fingerprint))
	if req.asJSON {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(statsBody{
			Fingerprint: fmt.Sprintf("%016x", res.fingerprint),
			Tensors:     res.tensors,
			Processes:   res.processes,
			Stats:       res.stats,
			Devices:     res.devices,
			Gap:         gap(res.stats),
		})
		return http.StatusOK
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(res.bytes)))
	_, _ = w.Write(res.bytes)
	return http.StatusOK
}

// statsBody is the JSON answer.
type statsBody struct {
	Fingerprint string                  `json:"fingerprint"`
	Tensors     int                     `json:"tensors"`
	Processes   []int32                 `json:"processes"`
	Stats       reshard.PlanStats       `json:"stats"`
	Devices     []reshard.DeviceTraffic `json:"devices"`
	Gap         float64                 `json:"network_gap"` // network bytes / lower bound
}

func gap(s reshard.PlanStats) float64 {
	if s.LowerBoundNetworkBytes == 0 {
		return 1
	}
	return float64(s.NetworkBytes) / float64(s.LowerBoundNetworkBytes)
}

// makePlan parses and plans: statistics only for JSON answers (no parts,
// so it stays cheap for fleet-sized specs), every part or one process's part
// for bytes.
func makePlan(req planRequest) (*planResult, error) {
	in, err := reshard.PlanInputFromSpec(req.spec)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	r := reshard.PlanRequest{Scope: reshard.ScopeAll, MaxPlanBytes: req.maxPlanBytes}
	switch {
	case req.asJSON:
		r.Scope = reshard.ScopeGlobal
	case req.process >= 0:
		r.Scope, r.Process = reshard.ScopeProcess, req.process
	}
	plan, err := reshard.NewPlanWithRequest(in, r)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	res := &planResult{fingerprint: plan.Fingerprint(), tensors: plan.NumTensors(), processes: plan.Processes()}
	if req.asJSON {
		if res.stats, err = plan.Stats(); err != nil {
			return nil, err
		}
		if res.devices, err = plan.AllDeviceTraffic(); err != nil {
			return nil, err
		}
		return res, nil
	}
	switch {
	case req.process >= 0 && req.key != nil:
		res.bytes, err = plan.SignedBytesForProcess(req.process, req.key)
	case req.process >= 0:
		res.bytes, err = plan.BytesForProcess(req.process)
	case req.key != nil:
		res.bytes, err = plan.SignedBytes(req.key)
	default:
		res.bytes, err = plan.Bytes()
	}
	return res, err
}
