package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	kclient "sigs.k8s.io/controller-runtime/pkg/client"

	"smolvm.dev/smolvm/kube/api/v1alpha1"
	"smolvm.dev/smolvm/server/e2b"
)

// E2B's state of a Sandbox (e2b.Info), on the object, so that it goes
// with it and every replica reads it.
const (
	// AnnotationTemplate is the templateID E2B's create named (its
	// source's, for a fork's copy), which E2B's answers report: the node
	// knows only the image it maps to ("host" for "base"), or the pool's
	// or snapshot's image.
	AnnotationTemplate = "smolvm.dev/template"
	// AnnotationMetadata is E2B's metadata, as JSON.
	AnnotationMetadata = "smolvm.dev/e2b-metadata"
)

// state is server/e2b's State over the cluster: a sandbox's Info is in
// its object's annotations, and the envd token key is derived from the
// nodes' token, which every replica holds, so that a token one replica
// handed out opens the sandbox through another.
type state struct{ c *cluster }

var _ e2b.State = state{}

// envdKeyLabel sets the key envd tokens derive from apart from any other
// use of the nodes' token.
const envdKeyLabel = "smolvm gateway: the key E2B's envd tokens derive from"

func (s state) Key(context.Context) ([]byte, error) {
	mac := hmac.New(sha256.New, []byte(s.c.g.cfg.NodeToken))
	mac.Write([]byte(envdKeyLabel))
	return mac.Sum(nil), nil
}

func (s state) Info(ctx context.Context, id string) (e2b.Info, bool, error) {
	sb, _, err := s.c.lookup(ctx, id)
	if err != nil {
		return e2b.Info{}, false, err
	}
	return info(sb)
}

// info is sb's E2B state; false if it has none.
func info(sb *v1alpha1.Sandbox) (e2b.Info, bool, error) {
	md, ok := sb.Annotations[AnnotationMetadata]
	if !ok {
		return e2b.Info{}, false, nil
	}
	in := e2b.Info{Template: sb.Annotations[AnnotationTemplate]}
	if err := json.Unmarshal([]byte(md), &in.Metadata); err != nil {
		return e2b.Info{}, false, fmt.Errorf("sandbox %s: annotation %s: %w", sb.Name, AnnotationMetadata, err)
	}
	return in, true, nil
}

func (s state) SaveInfo(ctx context.Context, id string, in e2b.Info) error {
	sb, _, err := s.c.lookup(ctx, id)
	if err != nil {
		return err
	}
	md, err := json.Marshal(in.Metadata)
	if err != nil {
		return err
	}
	patch := kclient.MergeFrom(sb.DeepCopy())
	if sb.Annotations == nil {
		sb.Annotations = map[string]string{}
	}
	sb.Annotations[AnnotationMetadata] = string(md)
	delete(sb.Annotations, AnnotationTemplate)
	if in.Template != "" {
		sb.Annotations[AnnotationTemplate] = in.Template
	}
	if err := s.c.g.cfg.Kube.Patch(ctx, sb, patch); err != nil {
		return fmt.Errorf("save the E2B state of sandbox %s: %w", sb.Name, err)
	}
	return nil
}

// AllInfo reads the objects of ctx's namespace (every namespace's for a
// request without one).
func (s state) AllInfo(ctx context.Context) (map[string]e2b.Info, error) {
	var list v1alpha1.SandboxList
	if err := s.c.g.cfg.Kube.List(ctx, &list, kclient.InNamespace(namespace(ctx))); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := map[string]e2b.Info{}
	for i := range list.Items {
		in, ok, err := info(&list.Items[i])
		if err != nil || !ok {
			continue
		}
		for _, inst := range list.Items[i].Status.Instances {
			out[inst.ID] = in
		}
	}
	return out, nil
}

// DeleteInfo has nothing to do: the state is deleted with its object.
func (state) DeleteInfo(context.Context, string) error { return nil }
