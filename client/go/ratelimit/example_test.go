package ratelimit_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"time"

	"ratelimit.dev/client/go/ratelimit"
)

func Example() {
	c, err := ratelimit.Dial("127.0.0.1:8081", ratelimit.WithTimeout(500*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	ok, err := c.Allow(ctx, "api", "user-1")
	var e *ratelimit.Error
	switch {
	case errors.As(err, &e):
		log.Printf("%v (field %q)", e.Code, e.Field)
	case !ok:
		log.Print("over the limit")
	}

	// Reserve 900 tokens and run when they are paid for (or give them back when ctx ends).
	if err := c.WaitN(ctx, "llm_tokens", "org-7", 900); err != nil {
		log.Print(err)
	}
}

func ExampleLimiter() {
	c, err := ratelimit.Dial("127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l := c.Limiter("llm_tokens", "org-7")
	r, err := l.ReserveN(ctx, 900)
	switch {
	case err != nil:
		log.Print(err)
	case !r.OK():
		log.Printf("refused (%v); retry at %v", r.Reason, r.RetryAt)
	default:
		select {
		case <-time.After(r.Delay()):
			// The 900 tokens are paid for: run the work.
		case <-ctx.Done():
			r.Cancel() // the work will not run: give the tokens back
		}
	}
}

func ExampleClient_HTTPMiddleware() {
	c, err := ratelimit.Dial("127.0.0.1:8081")
	if err != nil {
		log.Fatal(err)
	}
	limit := c.HTTPMiddleware(ratelimit.HTTPOptions{
		Limit: "api",
		// The API key; without one, the client's IP (an empty key would be answered 400).
		Key: func(r *http.Request) string {
			if k := r.Header.Get("X-Api-Key"); k != "" {
				return "key:" + k
			}
			return "ip:" + ratelimit.RemoteIP(r)
		},
		OnUnavailable: ratelimit.FailClosed, // the default
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello")) })
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}
