package deploy_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The alert rules of deploy/prometheus are valid (promtool check rules)
// and fire on the series that should fire them (promtool test rules,
// alerts_test.yml). promtool is in Debian's prometheus package, which
// .ci/run installs; elsewhere the test skips with a message.
func TestAlertRules(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is missing: CI must check the alert rules (apt-get install prometheus)")
		}
		t.Skip("promtool not found (apt-get install prometheus): the alert rules are not checked")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
	}
}
