// Command planserver is an HTTP planning service: POST a JSON spec
// (docs/spec.md) to /v1/plan and get the plan as FlatBuffers bytes
// (application/octet-stream) to ship to workers, or with ?format=json its
// statistics as JSON. ?process=N returns one worker's part. With -key-file
// every plan carries an HMAC-SHA-256 under that key, which workers check
// (reshard.PlanFromSignedBytes).
//
//	planserver -addr 127.0.0.1:8080
//	curl --data-binary @examples/specs/small_transformer.json \
//	     'http://127.0.0.1:8080/v1/plan?format=json'
//
// Bad specs get 400 with the library's message, bodies above -max-body get
// 413, plans whose estimated memory is above -max-plan-bytes get 422 with
// the estimate (ask for ?process=N instead), and a plan not ready within
// -timeout (or no free planner among -concurrency) gets 503.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg := DefaultConfig()
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	flag.Int64Var(&cfg.MaxBodyBytes, "max-body", cfg.MaxBodyBytes, "largest accepted spec, in bytes")
	flag.DurationVar(&cfg.PlanTimeout, "timeout", cfg.PlanTimeout, "longest wait for a plan")
	flag.IntVar(&cfg.MaxConcurrent, "concurrency", cfg.MaxConcurrent, "plannings running at once")
	flag.Int64Var(&cfg.MaxPlanBytes, "max-plan-bytes", cfg.MaxPlanBytes,
		"memory one planning may take, estimated before planning (0: half the memory, -1: no limit)")
	keyFile := flag.String("key-file", "", "sign every plan with the MAC key in this file (16 to 1024 bytes; workers verify)")
	flag.Parse()
	cfg.Logger = log.New(os.Stderr, "planserver: ", log.LstdFlags)
	if *keyFile != "" {
		key, err := LoadKey(*keyFile)
		if err != nil {
			log.Fatal(err)
		}
		cfg.Key = key
	}

	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	cfg.Logger.Printf("listening on http://%s/v1/plan", l.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := NewServer(cfg).Serve(ctx, l); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
