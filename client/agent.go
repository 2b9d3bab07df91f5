package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"smolvm.dev/smolvm/api"
	"smolvm.dev/smolvm/sandbox"
)

// StartAgentRun starts an agent run on the server (a repository on the
// server's host) and returns it running; WatchAgentRun follows it.
func (c *Client) StartAgentRun(ctx context.Context, req api.AgentRunRequest) (*api.AgentRun, error) {
	var run api.AgentRun
	if err := c.call(ctx, http.MethodPost, "/v1/agent/runs", req, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// AgentRuns lists the server's agent runs, newest first.
func (c *Client) AgentRuns(ctx context.Context) ([]api.AgentRun, error) {
	var runs []api.AgentRun
	return runs, c.call(ctx, http.MethodGet, "/v1/agent/runs", nil, &runs)
}

// AgentRun returns a run and its iterations.
func (c *Client) AgentRun(ctx context.Context, id string) (*api.AgentRunLog, error) {
	var l api.AgentRunLog
	if err := c.call(ctx, http.MethodGet, "/v1/agent/runs/"+url.PathEscape(id), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// StopAgentRun stops a running run and returns it once it has ended
// (stopped, its best checkpoint standing).
func (c *Client) StopAgentRun(ctx context.Context, id string) (*api.AgentRun, error) {
	var run api.AgentRun
	if err := c.call(ctx, http.MethodPost, "/v1/agent/runs/"+url.PathEscape(id)+"/stop", nil, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// ResumeAgentRun continues run id from iteration req.From's checkpoint
// on the server and returns it running; WatchAgentRun follows it.
func (c *Client) ResumeAgentRun(ctx context.Context, id string, req api.AgentResumeRequest) (*api.AgentRun, error) {
	var run api.AgentRun
	if err := c.call(ctx, http.MethodPost, "/v1/agent/runs/"+url.PathEscape(id)+"/resume", req, &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// BranchRuns lists the fan-outs of smolvm branch that the server's state
// holds, newest first.
func (c *Client) BranchRuns(ctx context.Context) ([]api.BranchRun, error) {
	var runs []api.BranchRun
	return runs, c.call(ctx, http.MethodGet, "/v1/agent/branches", nil, &runs)
}

// BranchRun returns a fan-out, its branches and its merge queue's steps.
func (c *Client) BranchRun(ctx context.Context, id string) (*api.BranchRunLog, error) {
	var l api.BranchRunLog
	if err := c.call(ctx, http.MethodGet, "/v1/agent/branches/"+url.PathEscape(id), nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// errWatched ends WatchAgentRun's event stream.
var errWatched = errors.New("watched")

// WatchAgentRun calls fn with run id's progress from the server's event
// stream until the run is done (or ctx ends, or fn fails). It returns at
// once, without calling fn, if the run is no longer running.
func (c *Client) WatchAgentRun(ctx context.Context, id string, fn func(api.AgentProgress) error) error {
	// Subscribed once the stream's headers are in; then a run that ends
	// is seen either here or in the stream.
	resp, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/events"})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	l, err := c.AgentRun(ctx, id)
	if err != nil {
		return err
	}
	if l.Run.State != "running" {
		return nil
	}
	err = eachLine(resp.Body, func(line []byte) error {
		var e sandbox.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("smolvm server: bad event: %w", err)
		}
		if e.ID != id || len(e.Data) == 0 {
			return nil
		}
		var p api.AgentProgress
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return fmt.Errorf("smolvm server: bad agent event: %w", err)
		}
		if err := fn(p); err != nil {
			return err
		}
		if p.Phase == "done" {
			return errWatched
		}
		return nil
	})
	if errors.Is(err, errWatched) {
		return nil
	}
	return err
}
