// Helpers shared by the alerts, rules and dashboards.
{
  // 'a, b, c' for by/on/without clauses.
  labels(list):: std.join(', ', list),

  // Every owner label, in the order alerts and tables show them.
  ownerLabels(c):: c.ownerLabels.kubernetes + c.ownerLabels.slurm + c.ownerLabels.process,

  // The allow-listed pod labels as the exporter names them on
  // xpu_workload_info.
  podLabels(c):: ['label_' + name for name in c.podLabelAllowList],

  // Appends the allow-listed pod labels of each series' pod (by cluster,
  // namespace and pod) to an expression; series of other owners pass
  // unchanged. Every pod's xpu_workload_info is grouped first, so two
  // exporters (or an owner that moved node) never make the join ambiguous.
  withPodLabels(c, expr)::
    if c.podLabelAllowList == [] then expr
    else
      local on = self.labels([c.clusterLabel, 'namespace', 'pod']);
      local info = 'xpu_workload_info{%s, pod!=""}' % c.xpuSelector;
      '(\n%s\n)\n  * on (%s) group_left (%s)\n  group by (%s, %s) (%s)\nor (\n%s\n  unless on (%s) %s\n)\n' % [
        self.indent(expr),
        on,
        self.labels(self.podLabels(c)),
        on,
        self.labels(self.podLabels(c)),
        info,
        self.indent(expr),
        on,
        info,
      ],

  // The hardware-Xid counters that counted an event in the last `window`,
  // one series per (device, xid, owner at the time). Two arms, because a
  // counter series is born with its first event already counted, which
  // increase() cannot see:
  //  - increase() for series that grew inside the window (a counter reset
  //    is handled by increase itself);
  //  - series the current exporter process had not served before the
  //    window: not seen in the lookback before it, or seen there only
  //    before the process started (the exporter keeps Xid counters in
  //    memory, so after a restart a series with old labels is a new
  //    event). Range functions skip stale markers, so a failed scrape or a
  //    gap shorter than the lookback never makes an old series look new.
  //    Without process_start_time_seconds only the lookback counts. The
  //    start time is the earliest of the last 2m: where a rollout runs a
  //    new pod beside the old one (maxSurge; the chart's no longer does)
  //    for a few scrapes with the same target labels, so the new start time sits next to the
  //    old pod's Xid series, which must not look new. After a real restart
  //    a series re-counted with old labels is seen as new 2m later.
  //    It is taken per target (by targetLabels) before the join: another
  //    target label that changes (a node or rack relabelled) leaves two
  //    start time series of one target for 2m, and the join failed for
  //    every device of the fleet (many-to-many; probe F PF3).
  //    Where the last 2m hold no start time while the instant lookback
  //    still shows one (Prometheus itself was down 2 to 5 minutes: no
  //    sample since), only the lookback counts too, where every old
  //    series was taken for new and paged (found by probe21-alerts D5).
  // `* 1` drops the metric name so the arms share label sets.
  xidRecent(c, window)::
    self.eventsRecent(c, 'xpu_xid_errors_total{%s, xid=~"%s"}' % [c.xpuSelector, self.regex(c.xidHardware)], window),

  // xidRecent for any event counter kept as the Xid counters are (born
  // with the first event, kept in the exporter's memory), such as AMD's
  // xpu_amd_ras_events_total.
  eventsRecent(c, x, window)::
    local start = 'process_start_time_seconds{%s}' % c.xpuSelector;
    local target = self.labels(c.targetLabels);
    |||
      increase(%(x)s[%(w)s]) > 0
      or (
        %(x)s * 1
          unless (
            max_over_time(timestamp(%(x)s)[%(lookback)s:1m] offset %(w)s)
              >= on (%(target)s) group_left ()
              min by (%(target)s) (min_over_time(%(start)s[2m]))
            or (
              present_over_time(%(x)s[%(lookback)s] offset %(w)s)
                unless on (%(target)s) min_over_time(%(start)s[2m])
            )
          )
      )
    ||| % { x: x, w: window, lookback: c.xidSeenLookback, target: target, start: start },

  // A device counter's increase over `window`, whichever owner's series
  // counted it. Device series carry their sole owner's labels, so when the
  // owner changes (an uncorrectable ECC error that kills the job holding
  // the GPU, a pod replaced) the driver's count continues on a new series,
  // born with the count so far: increase() of each series alone misses a
  // step between the two. The series are first reduced to one per device
  // key (and the labels in `by`), taking the largest (all of them carry the
  // same driver count; the old one may linger a lookback without a stale
  // marker), and that is sampled every minute for increase(), which still
  // handles a counter reset (a driver reload). The counters are the
  // driver's, not the exporter's, so a series born with a count is no event
  // by itself (unlike eventsRecent's Xid counters).
  deviceIncrease(c, x, window, by=[])::
    'increase((max by (%s) (%s))[%s:1m])' % [self.labels(c.deviceKeyLabels + by), x, window],

  // The same as a per-second rate, for counters judged by their rate.
  deviceRate(c, x, window)::
    'rate((max by (%s) (%s))[%s:1m])' % [self.labels(c.deviceKeyLabels), x, window],

  // expr with its uuid replaced by its parent's for a partition of a GPU
  // (MIG instance, AMD compute partition): to join what exists per
  // physical GPU (price, energy, the GPU's utilization).
  onGpu(expr):: 'label_replace(\n%s,\n  "uuid", "$1", "parent_uuid", "(.+)"\n)\n' % self.indent(expr),

  // metric{sel} on physical GPUs: the GPUs' own series, and their MIG
  // instances' or partitions' taken together per parent by aggregation
  // (say "sum without (uuid)") before they take their GPU's uuid. Two
  // compute instances of one GPU instance and profile differ by uuid
  // alone, and would be one label set once it is replaced (found by
  // review19: rules and panels failed for every GPU). Parenthesized.
  // read, if given, turns each selector into the expression read (say
  // perScrape).
  onGpuPerParent(aggregation, metric, sel, read=function(selector) selector)::
    '(\n%s\n  or\n%s\n)\n' % [
      std.rstripChars(self.indent(self.onGpu('%s (%s)' % [aggregation, read('%s{%s, parent_uuid!=""}' % [metric, sel])])), '\n '),
      self.indent(read('%s{%s, parent_uuid=""}' % [metric, sel])),
    ],

  // expr on physical GPUs, each partition's uuid kept in "device" while it
  // takes its parent's, so that two partitions of a GPU stay two series
  // until they are added up.
  onGpuKeepingDevice(expr)::
    self.onGpu('label_replace(\n%s,\n  "device", "$1", "uuid", "(.+)"\n)' % self.indent(expr)),

  // The lowest of metric{sel} over each physical GPU and its MIG instances
  // or partitions, by the device key (review19 R3). Not parenthesized.
  minOnGpu(c, metric, sel)::
    'min by (%s) %s' % [
      self.labels(c.deviceKeyLabels),
      self.onGpuPerParent('min by (%s, parent_uuid)' % self.labels(std.filter(function(l) l != 'uuid', c.deviceKeyLabels)), metric, sel),
    ],

  // expr (a condition on per-device series) without the MIG instances or
  // partitions of a GPU that gpuExpr (the same condition on the GPUs' own
  // series, which have a uuid) holds for: one alert for one lost or
  // unhealthy GPU, where each of its instances raised one too (found by
  // probe21-alerts: 3 critical pages for an H100 of 2 instances).
  withoutPartitionsOf(c, expr, gpuExpr)::
    '%s\n  unless on (%s, parent_uuid)\n  label_replace(%s, "parent_uuid", "$1", "uuid", "(.+)")' % [
      expr,
      self.labels(std.filter(function(l) l != 'uuid', c.deviceKeyLabels)),
      gpuExpr,
    ],

  // expr, one series per device, added up per physical GPU (with node,
  // vendor and model).
  sumOnGpu(c, expr)::
    'sum by (%s, node, vendor, model) (\n%s)\n' % [
      self.labels(c.deviceKeyLabels),
      self.indent(self.onGpuKeepingDevice(expr)),
    ],

  // expr (series of partitions of a GPU, parent_uuid set) times the
  // partition's share of its GPU, which the exporter serves as
  // xpu_partition_share_ratio: a MIG instance's compute slices over its
  // GPU's, as NVML counts them on that GPU (7 on A100 and H100, 4 on A30
  // and RTX PRO 6000 Blackwell, 2 on RTX PRO 5000 Blackwell, per NVIDIA's
  // MIG user guide, "Supported GPUs"), so no table of models is kept here;
  // 1/N for one of an AMD GPU's N compute partitions. A partition whose
  // share the exporter could not read is left out rather than guessed at.
  // sel selects the exporter's series.
  partitionFraction(c, sel, expr)::
    '(\n%s\n  * on (%s) group_left ()\n  xpu_partition_share_ratio{%s}\n)\n' % [self.indent(expr), self.labels(c.deviceKeyLabels), sel],

  // The window of one evaluation of the usage groups: 1 ms short of their
  // interval because Prometheus 2 closes ranges at both ends, so a sample
  // stamped exactly on an evaluation would count in two of them (always so
  // in promtool tests, where scrapes and evaluations share a grid);
  // Prometheus 3's left-open ranges then skip a sample stamped exactly 1 ms
  // after an evaluation, which moves a mean by one sample of many.
  usageWindow(c):: '%dms' % (self.seconds(c.usageRulesInterval) * 1000 - 1),

  // Per exporter (by its target labels), the scrapes of it that succeeded
  // in the window of one usage evaluation: xpu_exporter_build_info is
  // served at every one, and a failed scrape leaves it out (stale).
  // Summed over its label sets, which follow one another (a new version).
  scrapesInInterval(c)::
    'sum by (%s) (count_over_time(xpu_exporter_build_info{%s}[%s]))' % [self.labels(c.targetLabels), c.xpuSelector, self.usageWindow(c)],

  // A per-owner amount (an allocation, a utilized share: an instant
  // selector) weighed by the scrapes of its exporter in the window of one
  // usage evaluation: the sum of its samples there over the number of
  // successful scrapes. Read at the instant, one failed scrape just before
  // an evaluation left every owner of the exporter out of it, a minute of
  // GPU-hours and cost lost (probe F PF1); averaged per series, the old
  // and the new owner of a device both counted whole in the minute of a
  // change. Weighed so, a failed scrape takes no part, and at a change
  // each owner has the part of the scrapes it held the device at (3 of 4:
  // 0.75, and 0.25 for the other). Where the window holds no scrape of the
  // exporter (a scrape interval longer than the rules', an exporter
  // without build info) the latest value is read, counted once per
  // evaluation it covers, or, with mean, the mean of the window's samples
  // of the series present now.
  perScrape(c, series, mean=false)::
    local window = self.usageWindow(c);
    local scrapes = self.scrapesInInterval(c);
    local target = self.labels(c.targetLabels);
    local fallback =
      if mean then '(avg_over_time(%s[%s]) and %s or %s)' % [series, window, series, series]
      else series;
    '(\n  sum_over_time(%s[%s])\n    / on (%s) group_left ()\n  %s\n  or\n  %s\n    unless on (%s)\n  %s\n)' % [
      series,
      window,
      target,
      scrapes,
      fallback,
      target,
      scrapes,
    ],

  // A gauge averaged over one evaluation interval of the usage groups
  // (perScrape), for rules whose evaluations are summed into GPU-hours or
  // cost: the instant value read once per evaluation samples a load at the
  // same phase every time when its period divides the interval (0.9 busy
  // for 20 s of every minute was billed 0.18 or 0.72, never 0.30).
  meanOverInterval(c, series):: self.perScrape(c, series, mean=true),

  // The utilization of each GPU that has none of its own (a GPU in MIG
  // mode), by the device key: its partitions' scaled by their share
  // (partitionFraction). A GPU one of whose partitions has no reading (the
  // exporter leaves out those of compute instances sharing a GPU
  // instance; an instance that did not answer) is left out: its unread
  // part is unknown, not idle. sel selects the exporter's series; mean
  // averages the utilization over the usage rules' interval
  // (meanOverInterval).
  // With complete false, such a GPU has its read partitions' part: a
  // lower bound of its use, for rules that must place every GPU.
  // read, if given, turns each selector into the expression read
  // (lastReading), in place of mean.
  partitionsOnGpu(c, sel, mean=false, complete=true, read=null)::
    local u = 'xpu_utilization_ratio{%s, parent_uuid!=""}' % sel;
    local key = self.labels(c.deviceKeyLabels);
    local value = if read != null then read(u) else if mean then self.meanOverInterval(c, u) else u;
    'sum by (%s) (\n' % key
    + self.indent(self.onGpu(self.partitionFraction(c, sel, value)))
    + '\n)'
    + if complete then '\nunless on (%s)\n' % key + self.unreadPartitionGpus(c, sel, read) else '',

  // The GPUs (by the device key, labelled as the partition that has none)
  // one of whose partitions has no utilization reading: their own
  // utilization is unknown. Not parenthesized.
  // One series per GPU (grouped by its parent_uuid first: two compute
  // instances of one profile differ by uuid alone, and would be two series
  // of one label set once it is replaced).
  unreadPartitionGpus(c, sel, read=null)::
    local r = if read == null then function(s) s else read;
    self.onGpu('group by (%s, parent_uuid) (\n  %s\n    unless on (%s)\n    %s\n)' % [
      self.labels(std.filter(function(l) l != 'uuid', c.deviceKeyLabels)),
      r('xpu_device_info{%s, parent_uuid!=""}' % sel),
      self.labels(c.deviceKeyLabels),
      r('xpu_utilization_ratio{%s, parent_uuid!=""}' % sel),
    ]),

  // Each physical GPU's utilization, by the device key: its own, or for a
  // GPU that has none (a GPU in MIG mode) its partitions' (partitionsOnGpu).
  // An AMD GPU in compute partitions has its own (its partitions are left
  // out). Not parenthesized: wrap it before comparing it.
  gpuUtilization(c, sel, mean=false, complete=true, read=null)::
    local u = 'xpu_utilization_ratio{%s, parent_uuid=""}' % sel;
    'max by (%s) (%s)\n' % [self.labels(c.deviceKeyLabels), if read != null then read(u) else if mean then self.meanOverInterval(c, u) else u]
    + 'or ' + self.partitionsOnGpu(c, sel, mean, complete, read),

  // Every device's utilization, by the device key: a GPU's, a MIG
  // instance's or a partition's own, and for a GPU in MIG mode, which has
  // none, its instances' (partitionsOnGpu). Not parenthesized.
  deviceUtilization(c, sel, read=null)::
    local u = 'xpu_utilization_ratio{%s}' % sel;
    'max by (%s) (%s)\n' % [self.labels(c.deviceKeyLabels), if read == null then u else read(u)]
    + 'or ' + self.partitionsOnGpu(c, sel, read=read),

  // A series as its last sample within missedScrapeWindow, for alerts
  // that hold a condition on instant values: a failed scrape leaves every
  // series of its target stale for an evaluation, which emptied the
  // condition and started each alert's `for` again, so an exporter that
  // misses a scrape every quarter of an hour never raised a 15m alert
  // (probe F PF5). Range functions skip staleness markers. A series that
  // is gone for good is read missedScrapeWindow longer; a new value is
  // read at once. Owner labels are kept: a replaced owner's series is
  // read on for that long beside its successor's.
  lastReading(c, series):: 'last_over_time(%s[%s])' % [series, c.missedScrapeWindow],

  // lastReading per device, without owner labels: the device's last
  // reading once, where an owner change within the window leaves two
  // series of one device (the sum of a GPU's MIG instances counted such
  // an instance twice).
  lastDeviceReading(c, series)::
    'max without (%s) (%s)' % [self.labels(self.ownerLabels(c)), self.lastReading(c, series)],

  // The temperature series of one kind of sensor ('core': every sensor but
  // the memory's, i.e. NVIDIA's and Gaudi's gpu, AMD's edge and junction;
  // 'memory') at or above a limit, less a margin. Each is compared with
  // the limit the exporter serves for it (xpu_temperature_threshold_celsius):
  //   - NVIDIA's per-device threshold (no sensor label, from NVML's
  //     nvmlDeviceGetTemperatureThreshold) for its gpu or memory sensor;
  //   - AMD's per-sensor crit (hwmon temp*_crit, the throttle limit), joined
  //     on the sensor label, less ownMargin;
  //   - else, for a sensor with neither (Gaudi; an AMD sensor whose crit
  //     file is missing), the fixed fallback.
  // Limits are taken per device and sensor (max by the key) so that owner
  // labels, which change with every new pod, never break the join.
  overTemperatureLimit(c, kind, threshold, margin, ownMargin, fallback)::
    local key = self.labels(c.deviceKeyLabels);
    local limit = 'xpu_temperature_threshold_celsius{%s, threshold="%s"}' % [c.xpuSelector, threshold];
    local own = 'xpu_temperature_threshold_celsius{%s, threshold="crit"}' % c.xpuSelector;
    local temp(matcher) = 'xpu_temperature_celsius{%s, %s}' % [c.xpuSelector, matcher];
    local less(m) = if m == 0 then '' else ' - %g' % m;
    |||
      %(device)s
        >= on (%(key)s) group_left ()
        (max by (%(key)s) (%(limit)s)%(margin)s)
      or
      %(kind)s
        >= on (%(key)s, sensor) group_left ()
        (max by (%(key)s, sensor) (%(own)s)%(ownMargin)s)
      or (
        %(kind)s >= %(fallback)g
          unless on (%(key)s) %(limit)s
          unless on (%(key)s, sensor) %(own)s
      )
    ||| % {
      device: temp('sensor="%s"' % { core: 'gpu', memory: 'memory' }[kind]),
      kind: temp({ core: 'sensor!="memory"', memory: 'sensor="memory"' }[kind]),
      key: key,
      limit: limit,
      own: own,
      fallback: fallback,
      margin: less(margin),
      ownMargin: less(ownMargin),
    },

  // A device's condition held for a duration whoever owned the device. A
  // rule's `for` cannot say so: it follows one label set, and an owner
  // change (a pod replaced, a job requeued) starts another, so a GPU kept
  // hot under pods replaced faster than `for` never alerted
  // (probe21-alerts D4). So a recording rule (heldRecord) keeps, per device
  // key (`on`), 1 where the condition holds and 0 where the device's
  // series (sample) are there without it, and the alert (heldOnDevice) is
  // the device's series of the moment, with its owner's labels, where that
  // record was there `duration` ago, has been 1 at every evaluation since
  // and is 1 at its last. Read from stored samples, the hold costs one
  // evaluation of the condition, where a subquery ran it again at every
  // step of the window (review23 F7). The record precedes its alert in
  // their group, which evaluates its rules in order.
  //
  // The alert bridges a gap itself, instead of keep_firing_for: a scrape
  // missed, an exporter restarting (its series stale) leave the record's
  // last value and the device's last series (last_over_time over `bridge`)
  // in place. The series of the moment, where there is one, is the only
  // one, so that an owner replaced leaves no alert of the old owner
  // firing on (probe24-tempalerts D3), and a rule after it that leaves the
  // device out while another alert fires on it is not kept firing over
  // that alert (D1).
  heldRecord(expr, on, sample)::
    |||
      max by (%(on)s) (
      %(expr)s
      ) * 0 + 1
      or
      max by (%(on)s) (%(sample)s) * 0
    ||| % { expr: $.indent(expr), on: on, sample: sample },
  // The hold is judged on the record's samples, over which a gap is
  // bridged as the alert is: it was 1 at the last evaluation within
  // `missed` (missedScrapeWindow) or the bridge, the longer, before the
  // hold's start, and is 0 at none since. Read at the instant, the start
  // found no record where a scrape had failed `duration` before (a
  // staleness marker), which resolved the alert for an evaluation, and
  // fired XpuTemperatureHigh in XpuTemperatureCritical's place, `duration`
  // after every missed scrape (probe F PF4); and a hold that had to be 1
  // at some evaluation of the last `duration` ended within a gap longer
  // than that while the bridge went on: Critical (2m) resolved 2 minutes
  // into an exporter's death and High, bridged for 3, fired in its place
  // on the dead exporter's samples (PF6).
  heldOnDevice(sample, on, record, duration, bridge, missed)::
    local start = if $.seconds(bridge) > $.seconds(missed) then bridge else missed;
    // A bridge of 0 is none (a range of 0 does not parse).
    (
      if $.seconds(bridge) == 0 then |||
        %(sample)s
          and on (%(on)s)
        %(record)s == 1
      ||| else |||
        (
          %(sample)s
            or on (%(on)s)
          last_over_time(%(sample)s[%(bridge)s])
        )
          and on (%(on)s)
        last_over_time(%(record)s[%(bridge)s]) == 1
      |||
    ) % { sample: sample, on: on, record: record, bridge: bridge }
    + (
      if $.seconds(duration) == 0 then '' else
        '  and on (%(on)s)\nlast_over_time(%(record)s[%(start)s] offset %(duration)s) == 1\n  unless on (%(on)s)\nmin_over_time(%(record)s[%(duration)s]) < 1\n' % { on: on, record: record, duration: duration, start: start }
    ),

  // expr (device alerts) without the devices of the targets that had no
  // successful scrape for exporterDownFor and missedScrapeWindow, the time
  // XpuExporterDown waits from the last one (its `for` from the first
  // failed scrape, read one to two scrape intervals later), or that are no
  // longer scraped: XpuExporterDown says none of their alerts can fire.
  // Their windows (increase, avg_over_time, a held temperature) went on
  // reading the dead exporter's last samples, which kept alerts firing for
  // up to 15 minutes and let a temperature hold complete (probe F PF6).
  // The targets are those up names within exporterGoneLookback.
  withoutDeadExporters(c, expr)::
    local target = self.labels(c.targetLabels);
    local up = 'up{%s}' % c.xpuSelector;
    '(\n%s\n)\n  unless on (%s)\n(\n  group by (%s) (max_over_time(%s[%s]))\n    unless on (%s)\n  (max_over_time(%s[%ds]) == 1)\n)\n' % [
      self.indent(expr),
      target,
      target,
      up,
      c.exporterGoneLookback,
      target,
      up,
      self.seconds(c.exporterDownFor) + self.seconds(c.missedScrapeWindow),
    ],

  // '1m' -> 60, '2m30s' -> 150, '500ms' -> 0.5, '0' -> 0: rules need some
  // windows as numbers (time() arithmetic, evaluations per hour) while the
  // config keeps Prometheus durations, of which any may be given.
  seconds(duration)::
    local units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
    local digit(ch) = ch >= '0' && ch <= '9';
    local value(num, unit) =
      if std.objectHas(units, unit) then std.parseInt(num) * units[unit]
      else error 'duration %s: unit %s is none of ms, s, m, h, d, w, y' % [duration, unit];
    // Left to right: digits then a unit, as many times as given.
    local step(i, num, unit, total) =
      if i == std.length(duration) then
        (if unit != '' then total + value(num, unit)
         else if num == '0' then total
         else error 'duration %s: a number without a unit' % duration)
      else if digit(duration[i]) then
        (if unit != '' then step(i + 1, duration[i], '', total + value(num, unit))
         else step(i + 1, num + duration[i], '', total))
      else if num == '' then error 'duration %s: a unit without a number' % duration
      else step(i + 1, num, unit + duration[i], total);
    step(0, '', '', 0),

  // 0.05 -> '5%' for annotations.
  percent(ratio):: '%g%%' % (std.round(ratio * 10000) / 100),

  // Indents every line of a multi-line expression by two spaces, to nest it.
  indent(expr):: std.join('\n', ['  ' + line for line in std.split(std.rstripChars(expr, '\n'), '\n')]),

  // The scrape targets whose Gaudi collector fails, one series each with
  // vendor="habana": a failing hl-smi reports every Gaudi it knew down for
  // want of a reading, which says nothing of the devices. (An NVIDIA GPU
  // that falls off the bus leaves its collector succeeding; NVML failing
  // whole, init or device count, is left to page as the devices' loss.)
  // Not parenthesized.
  // read, if given, turns the selector into the expression read.
  collectorFailing(c, read=function(selector) selector)::
    'label_replace(%s == 0, "vendor", "habana", "", "")' % read('xpu_scrape_collector_success{%s, collector="gaudi"}' % c.xpuSelector),

  // 'a|b|c' for a regex matcher.
  regex(list):: std.join('|', list),

  // Alert annotation fragments. Owner labels are present only when the
  // device has exactly one owner, so the text falls through the owner kinds.
  deviceText::
    '{{ $labels.model }} GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}',
  ownerText::
    '{{ if $labels.pod }}pod {{ $labels.namespace }}/{{ $labels.pod }}'
    + '{{ else if $labels.slurm_job_id }}Slurm job {{ $labels.slurm_job_id }} of {{ $labels.slurm_user }}'
    + '{{ else if $labels.unit }}{{ $labels.unit }} of {{ $labels.user }}'
    + '{{ else }}no single owner{{ end }}',
  // The cluster from the alert's labels, else from Prometheus's external
  // labels (global.external_labels, which rule evaluation never sees: the
  // README's recommended way to name a cluster).
  clusterText(c)::
    '{{ with $labels.%(l)s }} in cluster {{ . }}{{ else }}{{ with $externalLabels.%(l)s }} in cluster {{ . }}{{ end }}{{ end }}' % { l: c.clusterLabel },

  // An alerting rule with the annotations every alert carries.
  alert(c, rule):: rule {
    annotations+: { runbook_url: c.runbookURLPattern % std.asciiLower(rule.alert) },
  },
}
