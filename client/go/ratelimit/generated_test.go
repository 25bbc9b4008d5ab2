package ratelimit_test

import (
	"os/exec"
	"testing"
)

// The committed gen/ is what generate.sh makes from proto/ now (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc).
func TestGeneratedCodeIsUpToDate(t *testing.T) {
	out, err := exec.Command("../generate.sh", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("generate.sh --check: %v\n%s", err, out)
	}
}
