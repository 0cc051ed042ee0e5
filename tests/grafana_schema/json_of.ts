// The JSON form of a @grafana/schema type. The schema's generated TypeScript declares some
// string fields as string enums (FieldColorModeId, ThresholdsMode, MappingType, ...), whose
// members a string in a JSON file can never be in TypeScript, although the JSON Grafana saves
// holds exactly their values. `${E}` is the union of a string enum's values; everything else
// (numbers, numeric enums, booleans, literal unions, optional fields, excess properties) is
// checked as declared.
export type JsonOf<T> = T extends string
  ? `${T}`
  : T extends readonly (infer E)[]
    ? JsonOf<E>[]
    : T extends object
      ? { [K in keyof T]: JsonOf<T[K]> }
      : T;
