// Artillery processor for ws.yml: send one message on the scenario's
// WebSocket and wait for its echo, recording the round trip as the
// histogram `websocket.echo_response_time` (ms) in Artillery's own report.
// Artillery's ws engine counts what it sends but does not time replies
// (the seed's socket.io engine timed each emit's acknowledgement); this
// is the same measurement for a plain WebSocket echo.
'use strict';

const ECHO_TIMEOUT_MS = 10000;

function sendAndWaitEcho(context, events, done) {
  const ws = context.ws;
  context.vars.seq = (context.vars.seq || 0) + 1;
  const id = `${context.vars.$uuid || 'vu'}:${context.vars.seq}`;
  const payload = JSON.stringify({ id, body: 'x'.repeat(32) });
  let finished = false;

  const finish = (err) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    ws.removeListener('message', onMessage);
    ws.removeListener('close', onClose);
    if (err) {
      events.emit('error', err);
      return done(new Error(err));
    }
    return done();
  };
  const onMessage = (data) => {
    let msg;
    try {
      msg = JSON.parse(data.toString());
    } catch (e) {
      return finish('echo not JSON');
    }
    if (msg.id !== id) return finish('wrong echo');
    const ms = Number(process.hrtime.bigint() - sent) / 1e6;
    events.emit('histogram', 'websocket.echo_response_time', ms);
    events.emit('counter', 'websocket.echoes_received', 1);
    return finish();
  };
  const onClose = () => finish('closed before echo');
  const timer = setTimeout(() => finish('echo timeout'), ECHO_TIMEOUT_MS);

  ws.on('message', onMessage);
  ws.on('close', onClose);
  events.emit('counter', 'websocket.messages_sent', 1);
  const sent = process.hrtime.bigint();
  ws.send(payload, (err) => {
    if (err) finish(`send failed: ${err.code || err.message}`);
  });
}

module.exports = { sendAndWaitEcho };
