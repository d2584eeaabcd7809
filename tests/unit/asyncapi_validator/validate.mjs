// Parse and validate an AsyncAPI document with the official parser: the AsyncAPI JSON Schema
// of its version (@asyncapi/specs), the parser's semantic rules, and every Avro payload with
// the Avro schema parser. Prints the diagnostics as JSON, one object per line:
// {"severity": 0 error | 1 warning | 2 info | 3 hint, "code", "message", "path"}.
// Exit 0: a document came out (no error); 1: it did not.
import { Parser, fromFile } from '@asyncapi/parser';
import { AvroSchemaParser } from '@asyncapi/avro-schema-parser';

const parser = new Parser();
parser.registerSchemaParser(AvroSchemaParser());
const { document, diagnostics } = await fromFile(parser, process.argv[2]).parse();
for (const d of diagnostics) {
  console.log(JSON.stringify({ severity: d.severity, code: d.code, message: d.message, path: d.path }));
}
process.exit(document ? 0 : 1);
