// Scores a run of the HTTP cache conformance suite (http-tests/cache-tests,
// cache-tests.fyi; `http-cache-tests` on the npm registry) as cache-tests.fyi
// counts it. Shared by bench/conformance (three proxies, the github checkout)
// and scripts/conformance (the CI gate, the npm package).
//
//   node scripts/conformance-score.mjs SUITE RAW_JSON PROXY VERSION OUT_JSON
//        [--failing FILE] [--known FILE]
//
// SUITE is the suite's root in either layout: the npm package (cli.mjs,
// server/, tests/ at the top) or the github checkout (test-engine/, tests/);
// both keep the test definitions in tests/. RAW_JSON is what the suite's cli
// printed. Writes OUT_JSON (per-test results with kind and name, counts per
// kind) and prints one "kind pass total dep_pass" line per kind.
//
// Counting: a test passes when the runner reports it passed and every test it
// depends_on passed too (cache-tests.fyi greys out a test whose dependency
// failed; it is not a pass); `pass` ignores dependencies, `dep_pass` does not.
//
// --failing FILE: the failing required and optimal tests, one tab-separated
// line each (id, result, name, why).
// --known FILE: the gate. FILE lists required tests allowed to fail, one id a
// line followed by its reason (`id  reason`, `#` comments); any other failing
// required test is printed and the exit status is 1. An entry that now passes
// is reported too (the list should shrink), without failing.
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const KINDS = ['required', 'optimal', 'check']

/** The suite's test definitions: tests/index.mjs, plus surrogate-control.mjs
 *  when the runner ran it (the npm package's cli adds it on its own; the
 *  github checkout's cli does not run it). */
async function loadSuites (suite, raw) {
  const load = async f => (await import(pathToFileURL(path.join(suite, 'tests', f)).href)).default
  const suites = [...await load('index.mjs')]
  if (fs.existsSync(path.join(suite, 'tests', 'surrogate-control.mjs'))) {
    const surrogate = await load('surrogate-control.mjs')
    const ran = surrogate.tests.some(t => raw[t.id] !== undefined)
    if (ran && !suites.some(s => s.id === surrogate.id)) suites.push(surrogate)
  }
  return suites
}

/** Per-test results and counts per kind, dependencies honoured as cache-tests.fyi does. */
export function score (suites, raw) {
  const byId = new Map()
  for (const s of suites) {
    for (const t of s.tests) {
      if (t.browser_only === true) continue // never run against a proxy
      byId.set(t.id, { suite: s.id, t })
    }
  }
  const depMemo = new Map()
  function depPass (id, seen = new Set()) {
    if (depMemo.has(id)) return depMemo.get(id)
    if (seen.has(id)) return false
    seen.add(id)
    const e = byId.get(id)
    let ok = raw[id] === true
    if (ok && e && e.t.depends_on) ok = e.t.depends_on.every(d => !byId.has(d) || depPass(d, seen))
    depMemo.set(id, ok)
    return ok
  }
  const tests = []
  const counts = {}
  for (const [id, { suite: sid, t }] of byId) {
    const kind = t.kind || 'required'
    const r = raw[id]
    let result
    if (r === undefined) result = 'not_run'
    else if (r === true) result = depPass(id) ? 'pass' : 'pass_dependency_failed'
    else if (Array.isArray(r) && r[0] === 'Setup') result = r[1] === 'retry' ? 'retry' : 'setup_fail'
    else result = 'fail'
    const c = counts[kind] || (counts[kind] = { pass: 0, total: 0, dep_pass: 0 })
    c.total++
    if (r === true) c.pass++
    if (depPass(id)) c.dep_pass++
    tests.push({
      id,
      kind,
      suite: sid,
      name: t.name,
      depends_on: t.depends_on || [],
      result,
      detail: Array.isArray(r) ? r.slice(0, 2) : null
    })
  }
  return { counts, tests }
}

/** Why a test did not pass: the runner's message, or the dependencies that failed. */
function why (t, byId) {
  if (t.result === 'pass_dependency_failed') {
    const failed = t.depends_on.filter(d => byId.has(d) && byId.get(d).result !== 'pass')
    return 'passed itself, but depends on ' + failed.join(', ')
  }
  return t.detail ? String(t.detail[1]) : ''
}

function failingLines (tests) {
  const byId = new Map(tests.map(t => [t.id, t]))
  const lines = []
  for (const kind of ['required', 'optimal']) {
    const bad = tests.filter(t => t.kind === kind && t.result !== 'pass')
    lines.push(`# failing ${kind} (${bad.length})`)
    for (const t of bad) lines.push(`${t.id}\t${t.result}\t${t.name}\t${why(t, byId)}`)
  }
  return lines.join('\n') + '\n'
}

/** The known-failures list: id -> reason. A line without a reason is refused. */
function readKnown (file) {
  const known = new Map()
  fs.readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    const text = line.replace(/#.*/, '').trim()
    if (text === '') return
    const [id, ...reason] = text.split(/\s+/)
    if (reason.length === 0) throw new Error(`${file}:${i + 1}: ${id} has no reason`)
    known.set(id, reason.join(' '))
  })
  return known
}

/** The gate: failing required tests not in `known`; prints them, returns their count. */
function gate (tests, known) {
  const byId = new Map(tests.map(t => [t.id, t]))
  const failing = tests.filter(t => t.kind === 'required' && t.result !== 'pass')
  const unexpected = failing.filter(t => !known.has(t.id))
  for (const t of failing.filter(t => known.has(t.id))) {
    console.error(`known failure: ${t.id} (${known.get(t.id)})`)
  }
  for (const id of known.keys()) {
    const t = byId.get(id)
    if (!t) console.error(`note: known failure ${id} is not among the tests run`)
    else if (t.result === 'pass') console.error(`note: known failure ${id} passes now: remove it from the list`)
  }
  const SHOWN = 40 // a broken build fails them all: the file has the rest
  for (const t of unexpected.slice(0, SHOWN)) {
    console.error(`FAIL: required test ${t.id} (${t.name}): ${t.result}: ${why(t, byId)}`)
  }
  if (unexpected.length > SHOWN) console.error(`FAIL: ... and ${unexpected.length - SHOWN} more`)
  return unexpected.length
}

async function main (argv) {
  const opts = {}
  const pos = []
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--failing' || argv[i] === '--known') opts[argv[i].slice(2)] = argv[++i]
    else pos.push(argv[i])
  }
  const [suite, rawFile, proxy, version, outFile] = pos
  if (!outFile) {
    console.error('usage: conformance-score.mjs SUITE RAW_JSON PROXY VERSION OUT_JSON [--failing FILE] [--known FILE]')
    return 2
  }
  const raw = JSON.parse(fs.readFileSync(rawFile, 'utf8'))
  const { counts, tests } = score(await loadSuites(suite, raw), raw)
  fs.writeFileSync(outFile, JSON.stringify({ proxy, version, suite, counts, tests }, null, 2) + '\n')
  if (opts.failing) fs.writeFileSync(opts.failing, failingLines(tests))
  for (const k of KINDS) {
    const c = counts[k] || { pass: 0, total: 0, dep_pass: 0 }
    console.log(`${k} ${c.pass} ${c.total} ${c.dep_pass}`)
  }
  if (opts.known) return gate(tests, readKnown(opts.known)) > 0 ? 1 : 0
  return 0
}

process.exitCode = await main(process.argv.slice(2))
