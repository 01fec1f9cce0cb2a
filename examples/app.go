// The smallest app jetrelay can deliver to, in Go: net/http only, no modules.
//
// As examples/app.py: it prints each message it is given and answers 200; 400 for a
// body that says "bad" (jetrelay dead-letters it); 503 with `Retry-After: 1` on the
// first delivery of a body that says "flaky" (jetrelay retries it a second later).
// A request with a `Jetrelay-Batch-Size` header is the batch form
// (`delivery.batch_size` > 1): the same verdicts, one per message, as `results`.
// GET /health answers 200 once it listens. `go run examples/app.go` listens on
// 127.0.0.1:8080, where config/quickstart.toml sends (PORT changes the port).
// With WEBHOOK_SECRET set (the `whsec_...` secret of jetrelay's `[http.signing]`), a
// request whose Standard Webhooks signature does not verify is refused with 401: the
// specification's algorithm in a few lines of crypto/hmac (its Go library,
// github.com/standard-webhooks/standard-webhooks/libraries/go, needs a module).
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// signed says whether the request carries a valid signature (always, without a secret).
func signed(r *http.Request, body []byte) bool {
	secret := os.Getenv("WEBHOOK_SECRET")
	if secret == "" {
		return true
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	id, ts := r.Header.Get("Webhook-Id"), r.Header.Get("Webhook-Timestamp")
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(at, 0)).Abs() > 5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := []byte("v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, s := range strings.Split(r.Header.Get("Webhook-Signature"), " ") {
		if hmac.Equal([]byte(s), want) {
			return true
		}
	}
	return false
}

// Above `delivery.batch_max_bytes` (1 MiB by default) plus the batch's JSON.
const maxBody = 16 << 20

// A message of a batch request, the fields this app reads.
type message struct {
	ID         string  `json:"id"`
	Subject    string  `json:"subject"`
	Sequence   uint64  `json:"sequence"`
	Delivered  int     `json:"delivered"`
	Data       *string `json:"data"`
	DataBase64 string  `json:"data_base64"`
}

// A message's verdict in a batch answer.
type result struct {
	ID           string `json:"id"`
	Action       string `json:"action"`
	RetryAfterMs int    `json:"retry_after_ms,omitempty"`
}

// verdict is one message's status alone and its action in a batch.
func verdict(body string, delivered int) (int, string) {
	switch {
	case strings.Contains(body, "bad"):
		return http.StatusBadRequest, "term"
	case strings.Contains(body, "flaky") && delivered == 1:
		return http.StatusServiceUnavailable, "retry"
	default:
		return http.StatusOK, "ack"
	}
}

func show(subject string, seq any, delivered int, body string, outcome any) {
	fmt.Printf("app <- %s seq=%v delivered=%d body='%s' -> %v\n", subject, seq, delivered, body, outcome)
}

func one(w http.ResponseWriter, r *http.Request, body string) {
	delivered, err := strconv.Atoi(r.Header.Get("Nats-Delivered"))
	if err != nil {
		delivered = 1
	}
	status, _ := verdict(body, delivered)
	show(r.Header.Get("Nats-Subject"), r.Header.Get("Nats-Sequence"), delivered, body, status)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
}

func batch(w http.ResponseWriter, body []byte) {
	var request struct {
		Messages []message `json:"messages"`
	}
	if err := json.Unmarshal(body, &request); err != nil {
		http.Error(w, "not a batch: "+err.Error(), http.StatusBadRequest)
		return
	}
	results := make([]result, 0, len(request.Messages))
	for _, m := range request.Messages {
		data := ""
		if m.Data != nil {
			data = *m.Data
		} else if b, err := base64.StdEncoding.DecodeString(m.DataBase64); err == nil {
			data = string(b)
		}
		_, action := verdict(data, m.Delivered)
		show(m.Subject, m.Sequence, m.Delivered, data, action)
		res := result{ID: m.ID, Action: action}
		if action == "retry" {
			res.RetryAfterMs = 1000
		}
		results = append(results, res)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(map[string][]result{"results": results}); err != nil {
		log.Print(err)
	}
}

func handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusOK)
		} else {
			http.NotFound(w, r)
		}
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if !signed(r, body) {
		fmt.Println("app <- a request without a valid signature -> 401")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Jetrelay-Batch-Size") != "" {
		batch(w, body)
	} else {
		one(w, r, string(body))
	}
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:"+port, http.HandlerFunc(handle)))
}
