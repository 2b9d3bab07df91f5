package manager

import (
	"context"
	"fmt"

	"smolvm.dev/smolvm/sandbox"
)

// setupNetwork gives r, a new record, its own network (namespace, veth,
// address, firewall, helper) if its policy asks for one. Creates, restores
// and forks all come through here, so a copy never shares its source's.
func (m *Manager) setupNetwork(ctx context.Context, r *record) error {
	if r.Config.Network == nil {
		return nil
	}
	return m.net.Setup(ctx, r.ID, r.Config.Network)
}

// networked returns r's record if it has a network of its own.
func (m *Manager) networked(ctx context.Context, ref string) (*record, error) {
	r, err := m.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r.Config.Network == nil || m.net == nil {
		return nil, fmt.Errorf("%s: %w: it was created with --net none, which has no network to police", r.Name, sandbox.ErrState)
	}
	return r, nil
}

// NetStatus reports a sandbox's network: policy, addresses, published
// ports as bound, and byte counters.
func (m *Manager) NetStatus(ctx context.Context, ref string) (*sandbox.NetworkState, error) {
	r, err := m.networked(ctx, ref)
	if err != nil {
		return nil, err
	}
	return m.net.Status(ctx, r.ID)
}

// NetEvents returns a sandbox's deny log, oldest first.
func (m *Manager) NetEvents(ctx context.Context, ref string) ([]sandbox.NetworkEvent, error) {
	r, err := m.networked(ctx, ref)
	if err != nil {
		return nil, err
	}
	return m.net.Events(r.ID)
}

// NetUpdate replaces a running sandbox's policy (mode and allow lists;
// published ports stay). New connections and DNS queries follow it at
// once; open connections carry on.
func (m *Manager) NetUpdate(ctx context.Context, ref string, p sandbox.Network) (*sandbox.Sandbox, error) {
	r, unlock, err := m.acquire(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if r.Config.Network == nil {
		return nil, fmt.Errorf("net update %s: %w: it was created with --net none; networks are set up at create", r.Name, sandbox.ErrState)
	}
	if r.State != sandbox.StateRunning {
		return nil, fmt.Errorf("net update %s: %w: sandbox is %s", r.Name, sandbox.ErrNotRunning, r.State)
	}
	p.Ports = nil
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("net update %s: %w: %w", r.Name, sandbox.ErrInvalid, err)
	}
	p.Ports = r.Config.Network.Ports
	if err := m.net.Update(ctx, r.ID, &p); err != nil {
		return nil, fmt.Errorf("net update %s: %w", r.Name, err)
	}
	r.Config.Network = &p
	return &r.Sandbox, update(ctx, m.st, r)
}
