package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fdbrep/fdbrep/cmd/internal/proctest"
)

// The node types of docs/DEPLOY.md's firewall rulesets.
const (
	nftFrontend    = "api_frontend"
	nftReplication = "replication"
	nftFDB         = "foundationdb"
	nftDefines     = "defines"
)

// nftBlock is a block of DEPLOY.md that a test applies as it is written: a
// fenced block whose info string is nft, after <!-- nft:NAME -->.
var nftBlock = regexp.MustCompile("(?s)<!-- nft:([a-z_]+) -->\\s*\n```nft\n(.*?)```")

// rulesets returns docs/DEPLOY.md's nftables blocks by name: the example
// define block and one ruleset per node type.
func rulesets(t testing.TB) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(proctest.ModuleRoot(t), "docs", "DEPLOY.md"))
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range nftBlock.FindAllStringSubmatch(string(raw), -1) {
		require.NotContains(t, out, m[1], "DEPLOY.md has two nft:%s blocks", m[1])
		out[m[1]] = m[2]
	}
	return out
}

var (
	defineName = regexp.MustCompile(`(?m)^define ([a-z_]+) =`)
	varUse     = regexp.MustCompile(`\$([a-z_]+)`)
)

// defined returns the variables a define block defines, in order.
func defined(block string) []string {
	var out []string
	for _, m := range defineName.FindAllStringSubmatch(block, -1) {
		out = append(out, m[1])
	}
	return out
}

// DEPLOY.md's firewall rulesets are what the deployment test applies:
// each node type's is there, drops what it does not accept on input and
// output, and uses only the variables of the define block.
func TestDeployDocRulesets(t *testing.T) {
	blocks := rulesets(t)
	names := make([]string, 0, len(blocks))
	for name := range blocks {
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{nftDefines, nftFrontend, nftReplication, nftFDB}, names)
	vars := defined(blocks[nftDefines])
	require.NotEmpty(t, vars)
	used := map[string]bool{}
	for _, name := range []string{nftFrontend, nftReplication, nftFDB} {
		rs := blocks[name]
		require.Contains(t, rs, "table inet fdbrep {", name)
		require.Contains(t, rs, "type filter hook input priority filter; policy drop;", name)
		require.Contains(t, rs, "type filter hook output priority filter; policy drop;", name)
		require.NotContains(t, rs, "define ", "%s: the addresses belong in the define block", name)
		for _, m := range varUse.FindAllStringSubmatch(rs, -1) {
			require.Contains(t, vars, m[1], "%s uses $%s, which the define block does not define", name, m[1])
			used[m[1]] = true
		}
	}
	for _, v := range vars {
		require.True(t, used[v], "the define block defines %s, which no ruleset uses", v)
	}
	// Replication hosts accept no connection from elsewhere.
	input := blocks[nftReplication][:strings.Index(blocks[nftReplication], "chain output")]
	require.False(t, slices.ContainsFunc([]string{"saddr", "dport"}, func(s string) bool { return strings.Contains(input, s) }),
		"the replication ruleset's input chain accepts connections:\n%s", input)
}
