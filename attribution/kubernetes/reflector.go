package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// Bounds of the list and watch requests.
const (
	// listPageSize is the limit asked of each list request ("Retrieving
	// large results sets in chunks", Kubernetes API concepts).
	listPageSize = 500
	// maxListPageBytes bounds one page, maxListBytes a whole list (and
	// what a watch holds: maxHeldBytes) and maxListPages its pages: a
	// node's pods or ResourceSlices are a few MiB at the very most (500
	// pods of 10 KiB of metadata, managedFields included, are 5 MiB),
	// and what is held of them costs about as much again in the heap.
	maxListPageBytes = 16 << 20
	maxListBytes     = 16 << 20
	maxListPages     = 100
	// maxEventBytes bounds one watch event (one line); etcd stores no
	// object above 1.5 MiB by default.
	maxEventBytes = 4 << 20
	// maxObjectBytes bounds an object read by a GET.
	maxObjectBytes = maxEventBytes
	// requestTimeout bounds a list page or a GET.
	requestTimeout = 60 * time.Second
	// minWatchTimeout is the least timeoutSeconds of a watch; each asks
	// for a random one up to twice that, as client-go's reflector does
	// (tools/cache/reflector.go, defaultMinWatchTimeout), so that the
	// exporters of a cluster do not all watch again at once.
	minWatchTimeout = 5 * time.Minute
	// watchMargin is how long past its timeoutSeconds the client waits
	// for the server to end a watch before giving up on the connection.
	watchMargin = 30 * time.Second
	// shortWatch is how long a watch that delivers nothing must last to
	// count as one: a server that ends every watch at once is failing,
	// as client-go takes it ("very short watch").
	shortWatch = time.Second
	// minBackoff and maxBackoff bound the wait before a request is made
	// again after a failure; it doubles at each failure in a row.
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
)

// maxHeldBytes bounds the objects held, a list's and what watch events
// add up to: maxListBytes; a variable for the tests.
var maxHeldBytes = maxListBytes

var errShortWatch = errors.New("the server ended the watch at once without an event")

// collection is what a reflector lists and watches: a resource path, the
// field selector that scopes it and the representations asked for.
type collection struct {
	path          string
	fieldSelector string
	listAccept    string
	watchAccept   string
}

// watchStore keeps what a reflector reads. Its methods are called from
// the reflector's goroutine alone.
type watchStore interface {
	// replace puts the objects of a complete list in place of all
	// those held: the ones that are not in it were deleted meanwhile.
	replace(objects []json.RawMessage) error
	// update adds or replaces an object (ADDED, MODIFIED).
	update(object json.RawMessage) error
	// remove forgets an object (DELETED).
	remove(object json.RawMessage) error
}

// reflector keeps a watchStore current from a list and watch of a
// collection, the pattern of "Efficient detection of changes" (Kubernetes
// API concepts): list, then watch from the list's resourceVersion for
// every change after it; a watch the server ends is started again from
// the last resourceVersion seen; when the server no longer has that
// version (410 Gone), list again.
type reflector struct {
	client *apiClient
	coll   collection
	store  watchStore
	// record is told the outcome of every request: nil for a success.
	record func(error)
	logger *slog.Logger
	// what names the watch in logs.
	what string

	listed atomic.Bool
	// held is, by UID, the size of each object the store holds, and
	// heldBytes their sum, which watch events may not take past
	// maxHeldBytes: a list is refused beyond it, and the same objects
	// streamed by a watch took the heap to 170 MB (probe23-k8sapi D2).
	// The reflector's goroutine alone uses them.
	held      map[string]int
	heldBytes int
	cancel    context.CancelFunc
	done      chan struct{}
}

func startReflector(client *apiClient, coll collection, store watchStore, record func(error), logger *slog.Logger, what string) *reflector {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reflector{client: client, coll: coll, store: store, record: record, logger: logger, what: what,
		cancel: cancel, done: make(chan struct{})}
	go r.run(ctx)
	return r
}

// hasListed says the first list has completed.
func (r *reflector) hasListed() bool { return r.listed.Load() }

// close stops the reflector and waits for it to end.
func (r *reflector) close() {
	r.cancel()
	<-r.done
	r.client.close()
}

func (r *reflector) run(ctx context.Context) {
	defer close(r.done)
	backoff := minBackoff
	// delay is the backoff jittered to between half and all of it, and
	// doubles it for the next failure in a row.
	delay := func() time.Duration {
		d := backoff/2 + rand.N(backoff/2)
		backoff = min(2*backoff, maxBackoff)
		return d
	}
	sleep := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	fail := func(err error) {
		r.record(err)
		d := delay()
		// At every retry: the resolver logs the source's failure and
		// recovery once each (Healthy), where a warning a retry was
		// two lines a minute for as long as RBAC was missing
		// (probe14-k8s D4).
		r.logger.Debug(r.what+" failed, retrying", "err", err, "retry_in", d)
		sleep(d)
	}
	// rv is the last resource version seen; listed says the store holds
	// the collection at rv, to be watched from there.
	var rv string
	listed := false
	for ctx.Err() == nil {
		if !listed {
			from, err := r.list(ctx, rv)
			if err != nil {
				// Where the version asked for is what failed (gone,
				// or ahead of the server's cache), the next list asks
				// for the newest, a consistent read; after any other
				// failure (a timeout, 429, 5xx) it asks the watch
				// cache again, as client-go's reflector does
				// (setIsLastSyncResourceVersionUnavailable), so that
				// a fleet's exporters recovering from an API server
				// outage do not all read from etcd (review23 F10).
				if versionUnavailable(err) {
					rv = ""
				}
				if ctx.Err() == nil {
					fail(err)
				}
				continue
			}
			rv, listed = from, true
			backoff = minBackoff
			r.record(nil)
			r.listed.Store(true)
		}
		next, delivered, relist, err := r.watch(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			backoff = minBackoff
		}
		rv = next
		listed = !relist
		switch {
		case err == nil:
			// Ended by the server at its timeoutSeconds: watch again.
		case isGone(err):
			// Not a failure of the source: the server's history has
			// moved past the watch ("410 Gone", Efficient detection of
			// changes). List again, at once when the watch had
			// delivered something, else after the backoff.
			r.logger.Debug(r.what+": resource version gone, listing again", "err", err)
			rv = ""
			if !delivered {
				sleep(delay())
			}
		default:
			fail(err)
		}
	}
}

// list reads the whole collection, in pages ("Retrieving large results
// sets in chunks": limit, and the continue of each page's metadata until
// it is empty), hands it to the store and returns its resourceVersion.
// The pages of one list are one snapshot, at the first page's resource
// version; a continue token that has expired is a 410 Gone, and the list
// starts over after the backoff.
//
// The first page asks for data not older than the last resource version
// seen, and for any ("0") before one was: the API server's watch cache
// can answer both, where a list without a resource version (after 410
// Gone) is a consistent read ("Resource versions", Kubernetes API
// concepts; client-go's reflector, relistResourceVersion, asks the same).
// The pages after it carry no resource version, which the server refuses
// beside a continue token (client-go tools/pager, ListPager.List).
func (r *reflector) list(ctx context.Context, rv string) (string, error) {
	if rv == "" && !r.listed.Load() {
		rv = "0"
	}
	var items []json.RawMessage
	var cont string
	var size int
	for pages := 0; ; pages++ {
		if pages == maxListPages {
			return "", fmt.Errorf("list %s: more than %d pages", r.coll.path, maxListPages)
		}
		q := url.Values{}
		if rv == "" || rv == "0" || cont != "" {
			// With a resource version of its own, a list with a limit
			// is an Exact read, which the watch cache cannot answer
			// (KEP-2523; "Resource versions", Kubernetes API concepts):
			// as client-go's reflector does, such a list is not paged
			// (review23 F9).
			q.Set("limit", strconv.Itoa(listPageSize))
		}
		if r.coll.fieldSelector != "" {
			q.Set("fieldSelector", r.coll.fieldSelector)
		}
		if cont != "" {
			q.Set("continue", cont)
		} else if rv != "" {
			q.Set("resourceVersion", rv)
		}
		var page struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := r.client.getJSON(pctx, r.coll.path, q, r.coll.listAccept, maxListPageBytes, &page)
		cancel()
		if err != nil {
			return "", err
		}
		for _, it := range page.Items {
			size += len(it)
		}
		if size > maxHeldBytes {
			return "", fmt.Errorf("list %s: larger than %d bytes", r.coll.path, maxHeldBytes)
		}
		items = append(items, page.Items...)
		rv = page.Metadata.ResourceVersion
		if cont = page.Metadata.Continue; cont == "" {
			break
		}
	}
	if rv == "" {
		return "", fmt.Errorf("list %s: no resourceVersion", r.coll.path)
	}
	if err := r.store.replace(items); err != nil {
		return "", fmt.Errorf("list %s: %w", r.coll.path, err)
	}
	r.held, r.heldBytes = make(map[string]int, len(items)), 0
	for _, it := range items {
		var m objectVersion
		if json.Unmarshal(it, &m) == nil {
			r.held[m.Metadata.UID] += len(it)
		}
		r.heldBytes += len(it)
	}
	return rv, nil
}

// watchEvent is one line of a watch: {"type", "object"} ("Efficient
// detection of changes"; the object of an ERROR is a Status).
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// objectVersion is the resourceVersion of an object, the one field of a
// BOOKMARK's object that is set ("Watch bookmarks").
type objectVersion struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		UID             string `json:"uid"`
	} `json:"metadata"`
}

// watch watches the collection from resource version rv until the watch
// ends, applying each event to the store. It returns the last resource
// version seen, whether an event came, and whether the store must be
// listed again: after an event that could not be read or applied (the
// change it carried is lost) and after the server's history has moved
// past rv (410 Gone).
func (r *reflector) watch(ctx context.Context, rv string) (last string, delivered, relist bool, err error) {
	timeout := minWatchTimeout + rand.N(minWatchTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout+watchMargin)
	defer cancel()
	q := url.Values{
		"watch":               {"true"},
		"resourceVersion":     {rv},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout / time.Second))},
	}
	if r.coll.fieldSelector != "" {
		q.Set("fieldSelector", r.coll.fieldSelector)
	}
	resp, err := r.client.get(ctx, r.coll.path, q, r.coll.watchAccept)
	if err != nil {
		return rv, false, isGone(err), err
	}
	defer resp.Body.Close()
	r.record(nil)
	start := time.Now()
	// The API server writes each event as one JSON document followed by
	// a newline (its JSON serializer is encoding/json's Encoder).
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		next, err := r.apply(line)
		if err != nil {
			return rv, delivered, true, fmt.Errorf("watch %s: %w", r.coll.path, err)
		}
		if next != "" {
			rv = next
		}
		delivered = true
	}
	if err := sc.Err(); err != nil {
		// An event too large to read is lost; a connection that broke
		// lost nothing that a watch from rv does not replay.
		return rv, delivered, errors.Is(err, bufio.ErrTooLong), fmt.Errorf("watch %s: %w", r.coll.path, err)
	}
	if !delivered && time.Since(start) < shortWatch {
		return rv, false, false, fmt.Errorf("watch %s: %w", r.coll.path, errShortWatch)
	}
	return rv, delivered, false, nil
}

// apply applies one watch event and returns its resource version.
func (r *reflector) apply(line []byte) (string, error) {
	var ev watchEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return "", fmt.Errorf("event: %w", err)
	}
	if ev.Type == "ERROR" {
		var st apiStatus
		if err := json.Unmarshal(ev.Object, &st); err != nil {
			return "", fmt.Errorf("ERROR event: %w", err)
		}
		if st.Code == 0 {
			st.Code = http.StatusInternalServerError
		}
		return "", &apiError{Path: r.coll.path, Code: st.Code, Reason: st.Reason, Message: st.Message}
	}
	var v objectVersion
	if err := json.Unmarshal(ev.Object, &v); err != nil {
		return "", fmt.Errorf("%s event: %w", ev.Type, err)
	}
	var err error
	switch ev.Type {
	case "ADDED", "MODIFIED":
		uid := v.Metadata.UID
		if total := r.heldBytes - r.held[uid] + len(ev.Object); total > maxHeldBytes {
			// Not applied: the relist that follows is refused as too
			// large, and the source reports it.
			return "", fmt.Errorf("%s event: the objects watched would be larger than %d bytes in all", ev.Type, maxHeldBytes)
		}
		if err = r.store.update(ev.Object); err == nil {
			r.heldBytes += len(ev.Object) - r.held[uid]
			r.held[uid] = len(ev.Object)
		}
	case "DELETED":
		if err = r.store.remove(ev.Object); err == nil {
			r.heldBytes -= r.held[v.Metadata.UID]
			delete(r.held, v.Metadata.UID)
		}
	case "BOOKMARK":
		// Only the resource version moves on.
	default:
		err = fmt.Errorf("unknown event type %q", ev.Type)
	}
	if err != nil {
		return "", fmt.Errorf("%s event: %w", ev.Type, err)
	}
	return v.Metadata.ResourceVersion, nil
}
