package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"smolvm.dev/smolvm/kube/kubetest"
	"smolvm.dev/smolvm/tests/testenv"
)

// TestDeploy applies deploy/'s manifests to a real API server and asks
// it, for each service account, whether each call the code makes is
// allowed, and that a few it does not make are not. The kustomization
// must list every manifest.
func TestDeploy(t *testing.T) {
	dir := filepath.Join(testenv.Root(), "deploy")
	var k struct{ Resources []string }
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") && d.Name() != "kustomization.yaml" {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	slices.Sort(files)
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(files, listed) {
		t.Fatalf("deploy/kustomization.yaml lists %v, deploy/ holds %v", listed, files)
	}

	cl := kubetest.Start(t) // with deploy/crds installed
	ctx := context.Background()
	for _, f := range k.Resources {
		if strings.HasPrefix(f, "crds/") {
			continue
		}
		for _, o := range manifest(t, filepath.Join(dir, f)) {
			if err := cl.Client.Create(ctx, o); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, o.GetKind(), o.GetName(), err)
			}
		}
	}

	type call struct {
		verb, group, resource, sub, ns string
		allowed                        bool
	}
	const sm, co = "smolvm.dev", "coordination.k8s.io"
	for sa, calls := range map[string][]call{
		"smolvm-node": {
			{"watch", sm, "sandboxes", "", "", true},
			{"update", sm, "sandboxes", "", "team-a", true}, // its finalizer
			{"update", sm, "sandboxes", "status", "team-a", true},
			{"update", sm, "sandboxsnapshots", "status", "team-a", true},
			{"get", sm, "sandboxtemplates", "", "team-a", true},
			{"create", co, "leases", "", "kube-node-lease", true},
			{"update", co, "leases", "", "kube-node-lease", true},
			{"delete", sm, "sandboxes", "", "team-a", false},
			{"get", "", "secrets", "", "team-a", false},
		},
		"smolvm-controller": {
			{"list", sm, "sandboxes", "", "", true},
			{"patch", sm, "sandboxes", "", "team-a", true}, // spec.nodeName
			{"patch", sm, "sandboxes", "status", "team-a", true},
			{"watch", sm, "sandboxsnapshots", "", "", true},
			{"patch", sm, "sandboxsnapshots", "", "team-a", true}, // spec.nodeName
			{"patch", sm, "sandboxsnapshots", "status", "team-a", true},
			{"get", sm, "sandboxtemplates", "", "team-a", true},
			{"watch", co, "leases", "", "kube-node-lease", true},
			{"update", co, "leases", "", "kube-node-lease", true}, // leader election
			{"create", sm, "sandboxes", "", "team-a", true},       // a warm pool's
			{"delete", sm, "sandboxes", "", "team-a", true},
			{"watch", sm, "sandboxwarmpools", "", "", true},
			{"update", sm, "sandboxwarmpools", "status", "team-a", true},
			{"update", sm, "sandboxsnapshots", "status", "team-a", false},
			{"delete", sm, "sandboxsnapshots", "", "team-a", false},
			{"delete", sm, "sandboxwarmpools", "", "team-a", false},
		},
		"smolvm-gateway": {
			{"create", sm, "sandboxes", "", "team-a", true},
			{"patch", sm, "sandboxes", "", "team-a", true}, // spec.paused
			{"delete", sm, "sandboxes", "", "team-a", true},
			{"watch", sm, "sandboxes", "", "", true},
			{"watch", sm, "sandboxtemplates", "", "", true},
			{"watch", sm, "sandboxwarmpools", "", "", true},
			{"create", sm, "sandboxsnapshots", "", "team-a", true}, // a fork's, a template's started state
			{"watch", sm, "sandboxsnapshots", "", "", true},
			{"delete", sm, "sandboxsnapshots", "", "team-a", true}, // deleteSnapshot, a template's removal
			{"patch", sm, "sandboxsnapshots", "", "team-a", true},  // a started state's owner
			{"create", sm, "sandboxtemplates", "", "team-a", true}, // a template built through the gateway
			{"update", sm, "sandboxtemplates", "", "team-a", true}, // rebuilt
			{"update", sm, "sandboxtemplates", "status", "team-a", true},
			{"delete", sm, "sandboxtemplates", "", "team-a", true},
			{"update", sm, "sandboxsnapshots", "status", "team-a", false},
			{"watch", co, "leases", "", "kube-node-lease", true},
			{"update", co, "leases", "", "kube-node-lease", false},
			{"update", sm, "sandboxes", "status", "team-a", false},
			{"get", "", "secrets", "", "team-a", false},
		},
	} {
		for _, c := range calls {
			r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:smolvm-system:" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:smolvm-system", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Subresource: c.sub, Namespace: c.ns},
			}}
			if err := cl.Client.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != c.allowed {
				t.Errorf("%s %s %s/%s %s in %q: allowed %t, want %t (%s)", sa, c.verb, c.resource, c.sub, c.group, c.ns, r.Status.Allowed, c.allowed, r.Status.Reason)
			}
		}
	}
}

// manifest decodes the objects of the YAML file at path.
func manifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o.Object != nil {
			out = append(out, &o)
		}
	}
}

// TestDeployNeedsPrivileged applies the node DaemonSet to an API server
// started without --allow-privileged=true (envtest sets it, and so do
// most distributions): it is refused, with the message docs/kube.md
// tells operators to expect.
func TestDeployNeedsPrivileged(t *testing.T) {
	const refused = "securityContext.privileged: Forbidden: disallowed by cluster policy"
	doc, err := os.ReadFile(filepath.Join(testenv.Root(), "docs", "kube.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), refused) {
		t.Errorf("docs/kube.md does not quote the API server's refusal %q", refused)
	}
	cl := kubetest.Start(t, "allow-privileged=false")
	ctx := context.Background()
	dir := filepath.Join(testenv.Root(), "deploy")
	for _, o := range manifest(t, filepath.Join(dir, "namespace.yaml")) {
		if err := cl.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	objs := manifest(t, filepath.Join(dir, "node.yaml"))
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "DaemonSet" })
	if i < 0 {
		t.Fatal("deploy/node.yaml holds no DaemonSet")
	}
	if err := cl.Client.Create(ctx, objs[i]); err == nil || !strings.Contains(err.Error(), refused) {
		t.Errorf("the node DaemonSet without --allow-privileged: %v, want %q", err, refused)
	}
}
