// A small Grafana dashboard builder: only what the mixin's dashboards use,
// so the mixin needs no grafonnet (or any other dependency).
local datasource = { type: 'prometheus', uid: '${datasource}' };

{
  // A PromQL query. Range queries feed time series; instant ones feed
  // tables and stats that summarise the picked time range.
  target(expr, legend='', instant=false):: {
    datasource: datasource,
    expr: expr,
    legendFormat: legend,
    range: !instant,
    instant: instant,
    [if instant then 'format']: 'table',
  },

  // noValue replaces Grafana's "No data", e.g. to say that a price is
  // missing rather than show a cost of zero.
  local panel(type, title, description, targets, unit, noValue) = {
    type: type,
    title: title,
    description: description,
    datasource: datasource,
    targets: std.mapWithIndex(function(i, t) t { refId: std.char(std.codepoint('A') + i) }, targets),
    fieldConfig: {
      defaults: { unit: unit, [if noValue != null then 'noValue']: noValue },
      overrides: [],
    },
  },

  timeseries(title, description, targets, unit='short', stack=false, min=null, max=null, noValue=null):: panel('timeseries', title, description, targets, unit, noValue) {
    fieldConfig+: {
      defaults+: {
        [if min != null then 'min']: min,
        [if max != null then 'max']: max,
        custom: {
          fillOpacity: if stack then 60 else 10,
          lineWidth: 1,
          showPoints: 'never',
          stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
        },
      },
    },
    options: {
      legend: { displayMode: 'table', placement: 'right', calcs: ['mean', 'max'] },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
  },

  stat(title, description, targets, unit='short', noValue=null):: panel('stat', title, description, targets, unit, noValue) {
    fieldConfig+: {
      defaults+: {
        thresholds: { mode: 'absolute', steps: [{ color: 'text', value: null }] },
      },
    },
    options: {
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      colorMode: 'value',
      graphMode: 'none',
      textMode: 'auto',
    },
  },

  // One row per label set, one column per label and one value column per
  // instant query: columns[i] = { name, unit } names the value of query i.
  table(title, description, targets, columns, noValue=null, hidden=[]):: panel('table', title, description, targets, 'short', noValue) {
    local valueField(i) = if std.length(targets) == 1 then 'Value' else 'Value #' + std.char(std.codepoint('A') + i),
    fieldConfig+: {
      overrides: [
        {
          // Overrides see the renamed column.
          matcher: { id: 'byName', options: columns[i].name },
          properties: [{ id: 'unit', value: columns[i].unit }],
        }
        for i in std.range(0, std.length(columns) - 1)
      ],
    },
    options: { showHeader: true, cellHeight: 'sm' },
    transformations: [
      { id: 'merge', options: {} },
      {
        id: 'organize',
        options: {
          excludeByName: { [name]: true for name in ['Time', '__name__', 'job', 'instance'] + hidden },
          renameByName: { [valueField(i)]: columns[i].name for i in std.range(0, std.length(columns) - 1) },
        },
      },
    ],
  },

  // Template variables. Every query variable allows All as ".*", which also
  // matches series without the label (a device with no single owner has no
  // namespace, a single cluster has no cluster label).
  datasourceVariable():: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    current: { selected: false, text: 'default', value: 'default' },
    hide: 0,
  },

  queryVariable(name, label, query, hide=false, description=null):: {
    name: name,
    label: label,
    [if description != null then 'description']: description,
    type: 'query',
    datasource: datasource,
    query: query,
    definition: query,
    refresh: 2,
    sort: 1,
    multi: true,
    includeAll: true,
    allValue: '.*',
    current: { selected: true, text: 'All', value: '$__all' },
    hide: if hide then 2 else 0,
  },

  // Lays panels out left to right, 24 columns wide; a row panel starts a
  // new line. Panel ids follow the order, so they stay stable.
  local layout(panels) =
    std.foldl(
      function(acc, p)
        local w = std.get(p, 'width', 12);
        local h = std.get(p, 'height', 8);
        local isRow = p.type == 'row';
        local wrap = isRow || acc.x + w > 24;
        local x = if wrap then 0 else acc.x;
        local y = if wrap then acc.y + acc.rowHeight else acc.y;
        acc {
          panels+: [std.mergePatch(p, { width: null, height: null }) {
            id: std.length(acc.panels) + 1,
            gridPos: { x: x, y: y, w: if isRow then 24 else w, h: if isRow then 1 else h },
          }],
          x: if isRow then 0 else x + w,
          y: if isRow then y + 1 else y,
          rowHeight: if isRow then 0 else (if wrap then h else std.max(acc.rowHeight, h)),
        },
      panels,
      { panels: [], x: 0, y: 0, rowHeight: 0 }
    ).panels,

  row(title):: { type: 'row', title: title, collapsed: false, panels: [] },

  // Sets a panel's size in grid units (24 columns wide).
  size(width, height=8):: { width: width, height: height },

  dashboard(c, uid, title, description, variables, panels):: {
    uid: uid,
    title: c.dashboardNamePrefix + title,
    description: description,
    tags: c.dashboardTags,
    timezone: c.dashboardTimezone,
    refresh: c.dashboardRefresh,
    schemaVersion: 39,
    editable: false,
    graphTooltip: 1,
    time: { from: 'now-6h', to: 'now' },
    links: [{
      title: 'XPU dashboards',
      type: 'dashboards',
      tags: c.dashboardTags,
      asDropdown: true,
      includeVars: true,
      keepTime: true,
    }],
    annotations: { list: [] },
    templating: { list: variables },
    panels: layout(panels),
  },
}
