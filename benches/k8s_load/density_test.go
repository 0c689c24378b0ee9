package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeLeases holds one Lease and checks resourceVersions on Update as kube-apiserver does.
type fakeLeases struct {
	cur     *coordinationv1.Lease
	rv      int
	gets    int
	updates int
}

func (f *fakeLeases) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	f.gets++
	if name != f.cur.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, name)
	}
	return f.cur.DeepCopy(), nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	f.updates++
	if l.ResourceVersion != f.cur.ResourceVersion {
		return nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name, nil)
	}
	f.rv++
	f.cur = l.DeepCopy()
	f.cur.ResourceVersion = strconv.Itoa(f.rv)
	return f.cur.DeepCopy(), nil
}

func TestRenew(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLease(7, t0)
	l.ResourceVersion = "1"
	f := &fakeLeases{cur: l.DeepCopy(), rv: 1}
	r := &renewer{api: f, lease: l}

	// A renewal writes the new renewTime on the version it holds, and keeps what came back.
	if err := r.renew(context.Background(), t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := f.cur.Spec.RenewTime.Time; !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("renewTime %v", got)
	}
	if r.lease.ResourceVersion != "2" || f.gets != 0 || r.conflicts != 0 {
		t.Errorf("after one renewal: rv %s, %d gets, %d conflicts", r.lease.ResourceVersion, f.gets, r.conflicts)
	}
	if *f.cur.Spec.HolderIdentity != "node-00007" || *f.cur.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("spec changed: %+v", f.cur.Spec)
	}

	// Someone else wrote the Lease: the renewal conflicts, reads it back and succeeds.
	f.rv++
	f.cur.ResourceVersion = strconv.Itoa(f.rv)
	if err := r.renew(context.Background(), t0.Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.conflicts != 1 || f.gets != 1 || f.updates != 3 || r.lease.ResourceVersion != "4" {
		t.Errorf("after a conflict: %d conflicts %d gets %d updates rv %s", r.conflicts, f.gets, f.updates, r.lease.ResourceVersion)
	}
	if got := f.cur.Spec.RenewTime.Time; !got.Equal(t0.Add(20 * time.Second)) {
		t.Errorf("renewTime after the conflict %v", got)
	}

	// A Lease that is gone: the error comes back.
	r.lease = newLease(8, t0)
	if err := r.renew(context.Background(), t0); !apierrors.IsNotFound(err) {
		t.Errorf("renewing a Lease that is gone: %v", err)
	}
}

func TestRenewOffset(t *testing.T) {
	iv := 10 * time.Second
	if renewOffset(0, 100, iv) != 0 || renewOffset(50, 100, iv) != 5*time.Second ||
		renewOffset(99, 100, iv) != 9900*time.Millisecond || renewOffset(3, 0, iv) != 0 {
		t.Errorf("offsets: %v %v %v", renewOffset(0, 100, iv), renewOffset(50, 100, iv), renewOffset(99, 100, iv))
	}
}
