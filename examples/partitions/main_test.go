package main

import "testing"

// TestExample runs the example as go run would.
func TestExample(t *testing.T) { main() }
